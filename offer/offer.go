package offer

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
)

// Set is what a host offers under a configuration.
type Set struct {
	Host *inventory.Host
	// Devices are the CDI device entries in the spec's order: by
	// physical device (GPU index, then MIG index, a GPU in MIG mode
	// itself before its MIG devices); a shared device's replicas in
	// replica order.
	Devices []Device
	// Shared are the shared physical devices, in the same order.
	Shared []*Share
	// Resources are the Kubernetes resources the device plugin
	// advertises under the configuration's [kubernetes] settings, sorted
	// by name; nil when Refused.
	Resources []Resource
	// Refused is why the device plugin cannot advertise the host under
	// the [kubernetes] settings (entries sharing a resource that disagree,
	// the single MIG strategy on a host it cannot describe, ...), nil when
	// it can. One check for every reader: the plugin and `gpuctk config
	// check` stop on it; `cdi generate` and `labels` warn (the spec serves
	// containers outside Kubernetes too, and the labels mark a node the
	// single strategy cannot describe as GPU feature discovery does).
	Refused error
	// Warnings are what an operator should know of the resolution that
	// does not stop it: every reader shows them.
	Warnings []string
	// Notes concern only what the node advertises to Kubernetes and is
	// as NVIDIA's plugin has it (a GPU in MIG mode offered whole under
	// the none strategy): the plugin, `config check` and `labels` show
	// them; `cdi generate`, whose spec serves every engine, does not.
	Notes []string
}

// Device is one CDI device entry: a whole GPU (in MIG mode or not), a
// whole MIG device or one replica of a shared device.
type Device struct {
	// Names are every name of the entry, the index-style one first:
	// "0", "GPU-<uuid>"; "mig-3", "4:0", "MIG-<uuid>"; "0::1" (and, as
	// [cdi] replica-names asks, "GPU-<uuid>::1", "4:0::1").
	Names []string
	// Device is the physical device behind the entry.
	inventory.Device
	// Share is how the physical device is shared, nil when it is offered
	// whole; Replica is the entry's replica number then.
	Share   *Share
	Replica int
}

// Name returns the entry's first, index-style name: "0", "mig-3", "0::1".
func (d Device) Name() string { return d.Names[0] }

// Share is a physical device offered as replicas. It is also what the MPS
// manager records of a device whose daemon it runs, so it encodes as JSON.
type Share struct {
	inventory.Device `json:"device"`
	Strategy         string `json:"strategy"`
	Replicas         int    `json:"replicas"`
	// ThreadPercentage and PinnedMemoryMiB are each MPS client's limits:
	// the configured ones, or an equal share of the SMs and the memory.
	ThreadPercentage int    `json:"threadPercentage,omitempty"`
	PinnedMemoryMiB  uint64 `json:"pinnedMemoryMiB,omitempty"`
	// Dir is the MPS daemon's folder, <state-root>/<uuid>, for MPS only.
	Dir string `json:"dir,omitempty"`
	// Resource is the Kubernetes resource of the replicas as configured,
	// "" for the device plugin's default.
	Resource string `json:"resource,omitempty"`
	// FailRequestsGreaterThanOne refuses a pod asking for more than one
	// replica of the resource.
	FailRequestsGreaterThanOne bool   `json:"failRequestsGreaterThanOne,omitempty"`
	Origin                     Origin `json:"origin"`
}

// IsMPS reports whether the device is shared through MPS.
func (s *Share) IsMPS() bool { return s.Strategy == config.MPS }

// String names the device in messages: "GPU 0 (GPU-…)" or "MIG device 4:1
// (MIG-…)".
func (s *Share) String() string {
	if s.MIG == nil {
		return fmt.Sprintf("GPU %d (%s)", s.GPU.Index, s.UUID())
	}
	return fmt.Sprintf("MIG device %s (%s)", s.GPUMIGName(), s.UUID())
}

// The MPS daemon's folders under Dir: its control socket's (bind-mounted
// into every replica container), its logs, and its clients' /dev/shm.
func (s *Share) PipeDir() string { return filepath.Join(s.Dir, "pipe") }
func (s *Share) LogDir() string  { return filepath.Join(s.Dir, "log") }
func (s *Share) ShmDir() string  { return filepath.Join(s.Dir, "shm") }

// ControlSocket is where the MPS daemon listens.
func (s *Share) ControlSocket() string { return filepath.Join(s.PipeDir(), "control") }

// Origin is where a share was configured.
type Origin struct {
	// File is the configuration file, "" for one built in code.
	File string `json:"file,omitempty"`
	// Entry is the 1-based position of the [[sharing]] entry.
	Entry int `json:"entry"`
}

func (o Origin) String() string {
	f := "config"
	if o.File != "" {
		f += " " + o.File
	}
	return f + ": [[sharing]] entry " + strconv.Itoa(o.Entry)
}

// Resolve matches the configuration's [[sharing]] entries against the
// host's devices and returns what the host offers. Every rule that needs
// the host is checked here; the errors name the file and the entry, and
// every offending device is listed, one line each.
func Resolve(host *inventory.Host, cfg *config.Config) (*Set, error) {
	owner := map[string]int{} // device UUID -> entry index
	for i := range cfg.Sharing {
		o := Origin{File: cfg.Path, Entry: i + 1}
		for _, sel := range cfg.Sharing[i].Devices {
			devs, err := host.Select(sel)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", o, err)
			}
			for _, d := range devs {
				if j, ok := owner[d.UUID()]; ok && j != i {
					return nil, fmt.Errorf("%s: %s is already shared by entry %d: a device may be claimed by one entry only", o, d, j+1)
				}
				owner[d.UUID()] = i
			}
		}
	}
	// A Config built in code may leave these unset: the defaults, once.
	def := config.Default()
	deviceStyles, replicaStyles, stateRoot := cfg.CDI.DeviceNames, cfg.CDI.ReplicaNames, cfg.MPS.StateRoot
	if deviceStyles == nil {
		deviceStyles = def.CDI.DeviceNames
	}
	if replicaStyles == nil {
		replicaStyles = def.CDI.ReplicaNames
	}
	if stateRoot == "" {
		stateRoot = def.MPS.StateRoot
	}
	set := &Set{Host: host}
	// whole offers a device whole, under its device-names.
	whole := func(dev inventory.Device) error {
		names := namesOf(dev, deviceStyles)
		if len(names) == 0 {
			return fmt.Errorf(`%s: [cdi] "device-names" %q gives %s no name: add "index", "uuid" or "type-index"`, where(cfg), cfg.CDI.DeviceNames, dev)
		}
		set.Devices = append(set.Devices, Device{Names: names, Device: dev})
		return nil
	}
	var errs []error
	// device offers a GPU not in MIG mode or a MIG device: whole, or as
	// the replicas of its [[sharing]] entry. An error in a share is kept
	// in errs, to report every one.
	device := func(d inventory.Device) error {
		i, shared := owner[d.UUID()]
		if !shared {
			return whole(d)
		}
		// "gpu:mig" alone names MIG devices only.
		names := namesOf(d, replicaStyles)
		if len(names) == 0 {
			errs = append(errs, fmt.Errorf(`%s: [cdi] "replica-names" %q gives the replicas of %s (shared by [[sharing]] entry %d) no name: add "index" or "uuid"`,
				where(cfg), cfg.CDI.ReplicaNames, d, i+1))
			return nil
		}
		s, err := share(d, cfg, i, stateRoot)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		set.Shared = append(set.Shared, s)
		for k := range s.Replicas {
			suffix := "::" + strconv.Itoa(k)
			rn := make([]string, len(names))
			for j, n := range names {
				rn[j] = n + suffix
			}
			set.Devices = append(set.Devices, Device{Names: rn, Device: d, Share: s, Replica: k})
		}
		return nil
	}
	devices, next := host.Devices(), 0
	for g := range host.GPUs {
		gpu := &host.GPUs[g]
		// A GPU in MIG mode is offered whole too, before its MIG
		// devices (even when it has none yet), as NVIDIA's toolkit
		// does: the device plugin's "none" MIG strategy hands it out as
		// one nvidia.com/gpu. Only "all-gpus" shares it whole (as
		// NVIDIA's plugin replicates every nvidia.com/gpu under "none");
		// other selectors name its MIG devices. Device names that name
		// none of it ("gpu:mig" alone) offer only its MIG devices.
		if d := (inventory.Device{GPU: gpu, Ordinal: -1}); gpu.MIGEnabled && len(namesOf(d, deviceStyles)) > 0 {
			if err := device(d); err != nil {
				return nil, err
			}
		}
		for ; next < len(devices) && devices[next].GPU == gpu; next++ {
			if err := device(devices[next]); err != nil {
				return nil, err
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	set.Resources, set.Warnings, set.Notes, set.Refused = resources(set, cfg.Kubernetes)
	return set, nil
}

// share describes device d as shared by entry i, its MPS daemon's folder
// under stateRoot, and checks it.
func share(d inventory.Device, cfg *config.Config, i int, stateRoot string) (*Share, error) {
	e := &cfg.Sharing[i]
	if d.GPU.MIGEnabled && !d.IsMIG() && e.Strategy == config.MPS {
		return nil, fmt.Errorf(`%s: GPU %d is in MIG mode: MPS cannot share it whole (its daemon would serve no client); select its MIG devices, or use "time-slicing"`,
			Origin{File: cfg.Path, Entry: i + 1}, d.GPU.Index)
	}
	s := &Share{
		Device: d, Strategy: e.Strategy, Replicas: e.Replicas,
		Resource: e.Resource, FailRequestsGreaterThanOne: e.FailsRequestsGreaterThanOne(),
		Origin: Origin{File: cfg.Path, Entry: i + 1},
	}
	if !s.IsMPS() {
		return s, nil
	}
	s.ThreadPercentage = e.ActiveThreadPercentage
	if s.ThreadPercentage == 0 {
		s.ThreadPercentage = max(1, 100/e.Replicas)
	}
	s.PinnedMemoryMiB = e.PinnedMemoryLimit.MiB()
	if e.PinnedMemoryLimit == 0 {
		s.PinnedMemoryMiB = d.MemoryMiB() / uint64(e.Replicas)
	}
	s.Dir = filepath.Join(stateRoot, d.UUID())
	if err := checkMPS(s, e); err != nil {
		return nil, err
	}
	return s, nil
}

// namesOf returns the device's names of the given styles in a fixed
// order: index, gpu:mig, uuid, type-index.
func namesOf(d inventory.Device, styles []string) []string {
	typeIndex := "gpu" + strconv.Itoa(d.GPU.Index)
	if d.MIG != nil {
		typeIndex = "mig" + d.GPUMIGName()
	}
	var out []string
	for _, n := range []struct{ style, name string }{
		{config.IndexNames, d.Name()}, {config.GPUMIGNames, d.GPUMIGName()}, {config.UUIDNames, d.UUID()}, {config.TypeIndexNames, typeIndex},
	} {
		if n.name != "" && contains(styles, n.style) {
			out = append(out, n.name)
		}
	}
	return out
}

// where names the configuration in errors: "config FILE", or "config"
// for one built in code.
func where(cfg *config.Config) string {
	if cfg.Path != "" {
		return "config " + cfg.Path
	}
	return "config"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// MPS returns the devices shared through MPS: one control daemon each.
func (s *Set) MPS() []*Share {
	var out []*Share
	for _, sh := range s.Shared {
		if sh.IsMPS() {
			out = append(out, sh)
		}
	}
	return out
}
