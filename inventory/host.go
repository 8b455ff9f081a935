package inventory

import (
	"fmt"
	"sort"
)

// Host is what a Source reports about one machine.
type Host struct {
	DriverVersion string `toml:"driver-version" json:"driverVersion"`
	CUDAVersion   string `toml:"cuda-version" json:"cudaVersion"`
	// Machine is the machine's product name (DMI's product_name, "DGX
	// A100"); "" when unknown. See ReadPlatform.
	Machine string `toml:"machine,omitempty" json:"machine,omitempty"`
	GPUs    []GPU  `toml:"gpu" json:"gpus"`
}

// GPU is one physical GPU.
type GPU struct {
	Index    int    `toml:"index" json:"index"`
	Minor    int    `toml:"minor" json:"minor"`
	UUID     string `toml:"uuid" json:"uuid"`
	Name     string `toml:"name" json:"name"`
	PCIBusID string `toml:"pci-bus-id" json:"pciBusID"`
	// PCIDeviceID is the GPU's PCI device and vendor ID in NVML's
	// pciDeviceId form, 0xDDDDVVVV (0x233510DE for an H200), the form
	// mig-parted's device-filter takes; 0 when not known.
	PCIDeviceID uint32 `toml:"pci-device-id,omitempty" json:"pciDeviceID,omitempty"`
	// MemoryMiB is the device memory in MiB.
	MemoryMiB uint64 `toml:"memory-mib" json:"memoryMiB"`
	// ComputeCapability is "major.minor", for example "8.0" for an A100.
	ComputeCapability string `toml:"compute-capability" json:"computeCapability"`
	MIGEnabled        bool   `toml:"mig" json:"migEnabled"`
	// Distance is how far this GPU is from each GPU of the host, by GPU
	// index, in NVML's topology levels (the Topology constants): 0 itself
	// or the same board, 10 behind one PCIe switch, 20 behind several, 30
	// the same host bridge, 40 the same NUMA node, 50 across sockets.
	// Empty when the host does not say; then no GPU is closer than another.
	Distance []int `toml:"distance,omitempty" json:"distance,omitempty"`
	// NUMANode is the NUMA node the GPU is attached to; nil where the
	// platform does not say (one node, or none reported). See ReadNUMA.
	NUMANode *int `toml:"numa-node,omitempty" json:"numaNode,omitempty"`
	// PCIClass is the GPU's PCI class code: 0x030200 (3D controller) for
	// a GPU in compute mode, 0x030000 (VGA controller) in graphics mode;
	// 0 when unknown. See ReadPlatform.
	PCIClass uint32 `toml:"pci-class,omitempty" json:"pciClass,omitempty"`
	// Clique is the NVLink fabric the GPU is attached to, as "<cluster
	// UUID>.<clique ID>" (GB200 NVL72 and the like); "" when none.
	Clique string `toml:"clique,omitempty" json:"clique,omitempty"`
	// MIG lists the MIG devices of a GPU with MIG enabled, in MIG index order.
	MIG []MIGDevice `toml:"mig-device" json:"migDevices,omitempty"`
}

// NVML's topology levels (nvmlGpuTopologyLevel_t), the values of
// GPU.Distance: the closest common ancestor of two GPUs.
const (
	TopologyInternal   = 0
	TopologySingle     = 10
	TopologyMultiple   = 20
	TopologyHostBridge = 30
	TopologyNUMANode   = 40
	TopologySystem     = 50
)

// Distance returns how far GPUs a and b (by index) are apart, or 0 when
// the host does not say.
func (h *Host) Distance(a, b int) int {
	for _, g := range h.GPUs {
		if g.Index == a && b >= 0 && b < len(g.Distance) {
			return g.Distance[b]
		}
	}
	return 0
}

// MIGDevice is one MIG instance (a compute instance inside a GPU instance).
type MIGDevice struct {
	// Index is the MIG device's index on its parent GPU.
	Index int `toml:"index" json:"index"`
	// GI and CI are the GPU instance and compute instance ids.
	GI      int    `toml:"gi" json:"gi"`
	CI      int    `toml:"ci" json:"ci"`
	UUID    string `toml:"uuid" json:"uuid"`
	Profile string `toml:"profile" json:"profile"`
	// MemoryMiB is the instance's device memory in MiB.
	MemoryMiB uint64 `toml:"memory-mib" json:"memoryMiB"`
	SMCount   int    `toml:"sm-count" json:"smCount"`
	// Engines are the instance's engines besides its SMs, as NVML reports
	// the MIG device's attributes.
	Engines Engines `toml:"engines,inline" json:"engines"`
}

// Engines counts a MIG device's copy engines, video decoders and
// encoders, JPEG decoders and optical flow accelerators (NVML's
// sharedCopyEngineCount, sharedDecoderCount, ... of the device's
// attributes, which for a compute instance spanning its GPU instance are
// the GPU instance profile's copyEngineCount, decoderCount, ...).
type Engines struct {
	Copy    int `toml:"copy" json:"copy"`
	Decoder int `toml:"decoder" json:"decoder"`
	Encoder int `toml:"encoder" json:"encoder"`
	JPEG    int `toml:"jpeg" json:"jpeg"`
	OFA     int `toml:"ofa" json:"ofa"`
}

// Source reports the GPUs of a host.
type Source interface {
	Host() (*Host, error)
}

// ComputeMajor returns the major number of the GPU's compute capability,
// or 0 when it is unknown.
func (g *GPU) ComputeMajor() int {
	var major, minor int
	if _, err := fmt.Sscanf(g.ComputeCapability, "%d.%d", &major, &minor); err != nil {
		return 0
	}
	return major
}

// Validate checks that a host description is self-consistent: unique
// indices, minors and UUIDs, MIG devices only on GPUs with MIG enabled.
func (h *Host) Validate() error {
	if h.DriverVersion == "" {
		return fmt.Errorf("driver version is empty")
	}
	indices := map[int]bool{}
	minors := map[int]bool{}
	uuids := map[string]bool{}
	for _, g := range h.GPUs {
		if g.UUID == "" {
			return fmt.Errorf("GPU %d: uuid is empty", g.Index)
		}
		if indices[g.Index] {
			return fmt.Errorf("GPU %d: index used twice", g.Index)
		}
		if minors[g.Minor] {
			return fmt.Errorf("GPU %d: minor %d used twice", g.Index, g.Minor)
		}
		if uuids[g.UUID] {
			return fmt.Errorf("GPU %d: uuid %s used twice", g.Index, g.UUID)
		}
		indices[g.Index], minors[g.Minor], uuids[g.UUID] = true, true, true
		if !g.MIGEnabled && len(g.MIG) > 0 {
			return fmt.Errorf("GPU %d: has MIG devices but MIG is disabled", g.Index)
		}
		if err := h.validDistance(g); err != nil {
			return err
		}
		if g.NUMANode != nil && *g.NUMANode < 0 {
			return fmt.Errorf("GPU %d: numa-node %d: want 0 or more, or no numa-node where the GPU has no NUMA affinity", g.Index, *g.NUMANode)
		}
		migIdx := map[int]bool{}
		for _, m := range g.MIG {
			if m.UUID == "" {
				return fmt.Errorf("GPU %d MIG device %d: uuid is empty", g.Index, m.Index)
			}
			if uuids[m.UUID] {
				return fmt.Errorf("GPU %d MIG device %d: uuid %s used twice", g.Index, m.Index, m.UUID)
			}
			if migIdx[m.Index] {
				return fmt.Errorf("GPU %d MIG device %d: index used twice", g.Index, m.Index)
			}
			uuids[m.UUID], migIdx[m.Index] = true, true
		}
	}
	return nil
}

// validDistance checks g's distance list: one per GPU, 0 to itself, the
// same both ways, known topology levels.
func (h *Host) validDistance(g GPU) error {
	if len(g.Distance) == 0 {
		return nil
	}
	if len(g.Distance) != len(h.GPUs) {
		return fmt.Errorf("GPU %d: distance has %d entries, want one per GPU (%d)", g.Index, len(g.Distance), len(h.GPUs))
	}
	for j, d := range g.Distance {
		if d < TopologyInternal || d > TopologySystem || d%10 != 0 {
			return fmt.Errorf("GPU %d: distance %d to GPU %d: want 0, 10, 20, 30, 40 or 50 (NVML topology levels)", g.Index, d, j)
		}
		if j == g.Index && d != TopologyInternal {
			return fmt.Errorf("GPU %d: distance %d to itself: want 0", g.Index, d)
		}
		for _, o := range h.GPUs {
			if o.Index == j && len(o.Distance) > 0 && len(o.Distance) > g.Index && o.Distance[g.Index] != d {
				return fmt.Errorf("GPU %d: distance %d to GPU %d, but GPU %d says %d: distances must be the same both ways", g.Index, d, j, j, o.Distance[g.Index])
			}
		}
	}
	return nil
}

// Sort orders GPUs by index and MIG devices by MIG index, the order device
// names are assigned in.
func (h *Host) Sort() {
	sort.SliceStable(h.GPUs, func(i, j int) bool { return h.GPUs[i].Index < h.GPUs[j].Index })
	for i := range h.GPUs {
		m := h.GPUs[i].MIG
		sort.SliceStable(m, func(a, b int) bool { return m[a].Index < m[b].Index })
	}
}
