package cdi

import (
	"fmt"
	"strconv"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
)

// HookSetup is the gpuctk-hook subcommand the spec calls at container
// creation: library links and linker cache in one invocation.
const HookSetup = "setup"

// Generator builds the spec of a host.
type Generator struct {
	vendor, class string
	hookPath      string
	shared        []config.Shared
	replicaNames  []string
	replicaEdits  func(config.Shared) (*specs.ContainerEdits, error)
}

// Option configures a Generator.
type Option func(*Generator)

// WithKind sets the vendor and class of the spec's kind.
func WithKind(vendor, class string) Option {
	return func(g *Generator) { g.vendor, g.class = vendor, class }
}

// WithHookPath sets where gpuctk-hook is installed on the host.
func WithHookPath(path string) Option { return func(g *Generator) { g.hookPath = path } }

// WithSharing offers these devices as replicas instead of whole.
func WithSharing(shared []config.Shared) Option { return func(g *Generator) { g.shared = shared } }

// WithReplicaNames sets which styles of name (inventory.IndexStyle, ...)
// each replica gets, as [cdi] replica-names does; a runtime reads every
// name of the spec at each container start. An empty list keeps the
// default, index names.
func WithReplicaNames(styles []string) Option {
	return func(g *Generator) {
		if len(styles) > 0 {
			g.replicaNames = styles
		}
	}
}

// WithReplicaEdits adds edits of its own to each replica of a shared
// device (the MPS client settings), on top of the device's nodes.
func WithReplicaEdits(f func(config.Shared) (*specs.ContainerEdits, error)) Option {
	return func(g *Generator) { g.replicaEdits = f }
}

// New returns a Generator; by default it writes kind nvidia.com/gpu,
// calls /usr/bin/gpuctk-hook and names replicas by index only.
func New(opts ...Option) *Generator {
	g := &Generator{vendor: "nvidia.com", class: "gpu", hookPath: "/usr/bin/gpuctk-hook",
		replicaNames: []string{inventory.IndexStyle}}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Summary counts what a spec offers.
type Summary struct {
	GPUs       int `json:"gpus"`
	MIGDevices int `json:"migDevices"`
	Replicas   int `json:"replicas"`
	Devices    int `json:"devices"`
}

func (s Summary) String() string {
	return fmt.Sprintf("%d GPUs, %d MIG devices, %d replicas, %d device names", s.GPUs, s.MIGDevices, s.Replicas, s.Devices)
}

// Generate returns the validated spec of a host whose driver files are f.
func (g *Generator) Generate(host *inventory.Host, f *driver.Files) (*specs.Spec, Summary, error) {
	var sum Summary
	if len(host.GPUs) == 0 {
		return nil, sum, fmt.Errorf("no NVIDIA GPUs found on this host: nothing to put in a spec")
	}
	sum.GPUs = len(host.GPUs)
	spec := &specs.Spec{
		Kind: g.vendor + "/" + g.class,
		ContainerEdits: specs.ContainerEdits{
			// Tell a legacy nvidia-container-runtime-hook, if one is
			// installed, that devices come through CDI.
			Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
			DeviceNodes: f.ControlNodes,
			Mounts:      f.Mounts,
		},
	}
	if args := g.hookArgs(f); args != nil {
		spec.ContainerEdits.Hooks = []*specs.Hook{{HookName: "createContainer", Path: g.hookPath, Args: args}}
	}

	shared := map[string]config.Shared{}
	for _, s := range g.shared {
		shared[s.UUID()] = s
	}
	var all []*specs.DeviceNode
	seen := map[string]bool{}
	for _, d := range host.Devices() {
		nodes, err := deviceNodes(f, d)
		if err != nil {
			return nil, sum, fmt.Errorf("%s (%s): %w", d, d.UUID(), err)
		}
		for _, n := range nodes {
			if !seen[n.Path] {
				seen[n.Path] = true
				all = append(all, n)
			}
		}
		if d.IsMIG() {
			sum.MIGDevices++
		}
		s, isShared := shared[d.UUID()]
		if !isShared {
			for _, name := range d.Names() {
				spec.Devices = append(spec.Devices, specs.Device{Name: name, ContainerEdits: specs.ContainerEdits{DeviceNodes: nodes}})
			}
			continue
		}
		edits := specs.ContainerEdits{DeviceNodes: nodes}
		if g.replicaEdits != nil {
			extra, err := g.replicaEdits(s)
			if err != nil {
				return nil, sum, err // names the device already
			}
			if extra != nil {
				edits.Env = extra.Env
				edits.Mounts = extra.Mounts
				edits.Hooks = extra.Hooks
				edits.DeviceNodes = append(append([]*specs.DeviceNode(nil), nodes...), extra.DeviceNodes...)
			}
		}
		sum.Replicas += s.Replicas
		names := d.NamesIn(g.replicaNames)
		for k := 0; k < s.Replicas; k++ {
			for _, name := range names {
				spec.Devices = append(spec.Devices, specs.Device{Name: name + "::" + strconv.Itoa(k), ContainerEdits: edits})
			}
		}
	}
	spec.Devices = append(spec.Devices, specs.Device{Name: "all", ContainerEdits: specs.ContainerEdits{DeviceNodes: all}})
	sum.Devices = len(spec.Devices)

	v, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, sum, err
	}
	spec.Version = v
	if err := Validate(spec); err != nil {
		return nil, sum, err
	}
	return spec, sum, nil
}

// hookArgs returns the argument list of the spec's one hook call, nil when
// there is nothing for the hook to do.
func (g *Generator) hookArgs(f *driver.Files) []string {
	if len(f.Links) == 0 && len(f.LibDirs) == 0 {
		return nil
	}
	args := []string{"gpuctk-hook", HookSetup}
	for _, l := range f.Links {
		args = append(args, "--link", l)
	}
	for _, l := range f.Libraries {
		args = append(args, "--library", l)
	}
	for _, d := range f.LibDirs {
		args = append(args, "--folder", d)
	}
	return args
}

// deviceNodes returns a device's own nodes: /dev/nvidiaN for a GPU; the
// parent's /dev/nvidiaN and the two capability nodes for a MIG device.
func deviceNodes(f *driver.Files, d inventory.Device) ([]*specs.DeviceNode, error) {
	gpu, err := f.GPUNode(d.GPU.Minor)
	if err != nil {
		return nil, err
	}
	if !d.IsMIG() {
		return []*specs.DeviceNode{gpu}, nil
	}
	caps, err := f.MIGNodes(d.GPU.Minor, d.MIG.GI, d.MIG.CI)
	if err != nil {
		return nil, err
	}
	return append([]*specs.DeviceNode{gpu}, caps...), nil
}

// Validate checks a spec with the CDI library's validators: version, kind,
// device names (unique), and every container edit.
func Validate(spec *specs.Spec) error {
	if err := specs.ValidateVersion(spec); err != nil {
		return fmt.Errorf("invalid spec: %w", err)
	}
	vendor, class := parser.ParseQualifier(spec.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fmt.Errorf("invalid spec kind %q: %w", spec.Kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fmt.Errorf("invalid spec kind %q: %w", spec.Kind, err)
	}
	if err := (&cdiapi.ContainerEdits{ContainerEdits: &spec.ContainerEdits}).Validate(); err != nil {
		return fmt.Errorf("invalid spec: common edits: %w", err)
	}
	names := map[string]bool{}
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return fmt.Errorf("invalid spec: %w", err)
		}
		if names[d.Name] {
			return fmt.Errorf("invalid spec: device %q appears twice", d.Name)
		}
		names[d.Name] = true
		if err := (&cdiapi.ContainerEdits{ContainerEdits: &d.ContainerEdits}).Validate(); err != nil {
			return fmt.Errorf("invalid spec: device %q: %w", d.Name, err)
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("invalid spec: no devices")
	}
	return nil
}
