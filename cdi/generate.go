package cdi

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/hook"
	"github.com/gpuctk/gpuctk/internal/plural"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/mps"
	"github.com/gpuctk/gpuctk/offer"
)

// IsCapability reports whether a device name is a capability device's:
// the files of one driver capability beyond compute and utility
// (capability-graphics, ...). They are no GPU: a
// container asks for one beside its GPUs.
func IsCapability(name string) bool { return strings.HasPrefix(name, capability.DevicePrefix) }

// HookSetup is the gpuctk-hook subcommand the spec calls at container
// creation: library links and linker cache in one invocation.
const HookSetup = "setup"

// Generator builds the spec of a host.
type Generator struct {
	vendor, class string
	hookPath      string
	// cudaCompat lets the hook prefer an image's CUDA forward-compatibility
	// libraries, on hosts whose GPUs support them.
	cudaCompat bool
	// params is the host's driver params file, which the hook copies over
	// the container's with ModifyDeviceFiles: 0; empty: the hook leaves it.
	params string
}

// Option configures a Generator.
type Option func(*Generator)

// WithKind sets the vendor and class of the spec's kind.
func WithKind(vendor, class string) Option {
	return func(g *Generator) { g.vendor, g.class = vendor, class }
}

// WithHookPath sets where gpuctk-hook is installed on the host.
func WithHookPath(path string) Option { return func(g *Generator) { g.hookPath = path } }

// New returns a Generator with the configuration's defaults (kind
// nvidia.com/gpu, hook /usr/bin/gpuctk-hook) changed by opts.
func New(opts ...Option) *Generator {
	return ForConfig(config.Default(), opts...)
}

// ForConfig returns the Generator the configuration describes, changed by
// opts.
func ForConfig(c *config.Config, opts ...Option) *Generator {
	g := &Generator{vendor: c.CDI.Vendor, class: c.CDI.Class, hookPath: c.CDI.HookPath,
		cudaCompat: c.CDI.CUDACompat == nil || *c.CDI.CUDACompat}
	if c.CDI.DisableDeviceNodeModification == nil || *c.CDI.DisableDeviceNodeModification {
		g.params = filepath.Join(c.CDI.DevRootOrDriver(), hook.ParamsPath)
	}
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
	// Capabilities are the capability devices written (capability-graphics,
	// ...): the driver capabilities this host has files
	// for beyond compute and utility.
	Capabilities []string `json:"capabilities,omitempty"`
}

func (s Summary) String() string {
	return plural.Count(s.GPUs, "GPU") + ", " + plural.Count(s.MIGDevices, "MIG device") + ", " + plural.Count(s.Replicas, "replica") + ", " + plural.Count(s.Devices, "device name")
}

// Generate returns the validated spec of what a host offers, its driver
// files being f.
func (g *Generator) Generate(set *offer.Set, f *driver.Files) (*specs.Spec, Summary, error) {
	var sum Summary
	if len(set.Host.GPUs) == 0 {
		return nil, sum, fmt.Errorf("no NVIDIA GPUs found on this host: nothing to put in a spec")
	}
	sum.GPUs = len(set.Host.GPUs)
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
	var all []*specs.DeviceNode
	var driLinks []string
	seen := map[string]bool{}
	var nodes []*specs.DeviceNode
	var edits specs.ContainerEdits
	for i, d := range set.Devices {
		// Entries of one physical device come together: find its nodes
		// and its replicas' edits once.
		if i == 0 || set.Devices[i-1].UUID() != d.UUID() {
			var err error
			var links []string
			if nodes, links, err = deviceNodes(f, d.Device); err != nil {
				return nil, sum, fmt.Errorf("%s (%s): %w", d.Device, d.UUID(), err)
			}
			driLinks = append(driLinks, links...)
			for _, n := range nodes {
				if !seen[n.Path] {
					seen[n.Path] = true
					all = append(all, n)
				}
			}
			if d.IsMIG() {
				sum.MIGDevices++
			}
			edits = specs.ContainerEdits{DeviceNodes: nodes}
			if d.Share != nil {
				sum.Replicas += d.Share.Replicas
				if d.Share.IsMPS() {
					extra := mps.ReplicaEdits(g.hookPath, d.Share)
					for _, h := range extra.Hooks {
						h.Env = hookEnv
					}
					edits.Env, edits.Mounts, edits.Hooks = extra.Env, extra.Mounts, extra.Hooks
				}
			}
		}
		for _, name := range d.Names {
			spec.Devices = append(spec.Devices, specs.Device{Name: name, ContainerEdits: edits})
		}
	}
	spec.Devices = append(spec.Devices, specs.Device{Name: "all", ContainerEdits: specs.ContainerEdits{DeviceNodes: all}})
	sum.Devices = len(spec.Devices)
	for _, d := range capabilityDevices(f) {
		spec.Devices = append(spec.Devices, d)
		sum.Capabilities = append(sum.Capabilities, d.Name)
	}
	if args := g.hookArgs(set.Host, f, driLinks); args != nil {
		spec.ContainerEdits.Hooks = []*specs.Hook{{HookName: "createContainer", Path: g.hookPath, Args: args, Env: hookEnv}}
	}

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

// hookEnv is the environment of every gpuctk-hook call in the spec (the
// runtime gives a hook that and nothing else). The hook does its work in
// one goroutine; with a P per core, the Go runtime starts threads at
// start to run its own goroutines on the idle Ps (an empty program: 4
// threads with two Ps, 2 with one). One P saves 0.11 to 0.2 ms a call
// on a 2-core VM, and more on a host with more cores.
var hookEnv = []string{"GOMAXPROCS=1"}

// capabilityDevices returns a device per capability whose files the host
// has (CDI refuses a device without edits). There is no device for "all":
// it would repeat every mount of the others, doubling their share of the
// spec that every runtime parses; gpuctk-runtime and the device plugin
// expand "all" into the devices the spec has.
func capabilityDevices(f *driver.Files) []specs.Device {
	var out []specs.Device
	for _, c := range capability.Extra() {
		if m := f.CapabilityMounts[c]; len(m) > 0 {
			out = append(out, specs.Device{Name: c.Device(), ContainerEdits: specs.ContainerEdits{Mounts: m}})
		}
	}
	return out
}

// hookArgs returns the argument list of the spec's one hook call, nil when
// there is nothing for the hook to do. It lists every capability's links
// and libraries and every GPU's /dev/dri by-path links: the hook makes a
// link only when its target is in the container and adds only libraries
// that are there, so each container gets those of the devices it has.
func (g *Generator) hookArgs(h *inventory.Host, f *driver.Files, driLinks []string) []string {
	if len(f.Links) == 0 && len(f.LibDirs) == 0 && len(driLinks) == 0 && len(f.Linked) == 0 && g.params == "" {
		return nil
	}
	args := []string{"gpuctk-hook", HookSetup}
	// First: the links below may lead to them.
	for _, l := range f.Linked {
		args = append(args, "--driver-file", l.String())
	}
	for _, l := range append(f.Links[:len(f.Links):len(f.Links)], driLinks...) {
		args = append(args, "--link", l)
	}
	for _, l := range f.Libraries {
		args = append(args, "--library", l)
	}
	for _, d := range f.LibDirs {
		args = append(args, "--folder", d)
	}
	// One call serves every device of the spec, so forward compatibility
	// is offered only when every GPU of the host supports it.
	version := f.Version
	if version == "" {
		version = h.DriverVersion
	}
	if g.cudaCompat && version != "" && len(f.LibDirs) > 0 && h.ForwardCompatible() {
		args = append(args, "--cuda-compat", version)
	}
	if g.params != "" {
		args = append(args, "--nvidia-params", g.params)
	}
	// With capability-graphics, EGL is to see only the container's GPUs.
	for _, l := range f.Libraries {
		if path.Base(l) == "libEGL_nvidia.so.0" {
			args = append(args, "--egl-library", l)
			break
		}
	}
	return args
}

// deviceNodes returns a device's own nodes: /dev/nvidiaN and the DRM
// nodes (/dev/dri/cardN, renderDN) for a GPU, with the by-path links of
// the DRM nodes; the parent's /dev/nvidiaN and the two capability nodes
// for a MIG device. A MIG device gets no DRM nodes, as with NVIDIA's
// toolkit: they open the whole GPU for rendering and display, which MIG
// does not partition.
func deviceNodes(f *driver.Files, d inventory.Device) ([]*specs.DeviceNode, []string, error) {
	gpu, err := f.GPUNode(d.GPU.Minor)
	if err != nil {
		return nil, nil, err
	}
	if !d.IsMIG() {
		dri, links, err := f.DRI(d.GPU.Minor, d.GPU.PCIBusID)
		if err != nil {
			return nil, nil, err
		}
		return append([]*specs.DeviceNode{gpu}, dri...), links, nil
	}
	caps, err := f.MIGNodes(d.GPU.Minor, d.MIG.GI, d.MIG.CI)
	if err != nil {
		return nil, nil, err
	}
	return append([]*specs.DeviceNode{gpu}, caps...), nil, nil
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
