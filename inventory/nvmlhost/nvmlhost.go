package nvmlhost

import (
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/internal/filekind"
	"github.com/gpuctk/gpuctk/inventory"
)

// Source reads the host from the driver's management library
// (libnvidia-ml.so.1). It is the inventory.Source used on real hosts.
type Source struct {
	lib nvml.Interface
	// path names the library in errors; empty when unknown.
	path string
}

// New returns a Source that queries lib. Production code passes
// nvml.New(nvml.WithLibraryPath(path)) (see Open); tests pass go-nvml's
// mocks.
func New(lib nvml.Interface) *Source {
	return &Source{lib: lib}
}

// Open returns the Source for the libnvidia-ml.so.1 at libPath, the one
// driver discovery found under the driver root. The library is loaded by
// Host, not here.
func Open(libPath string) (*Source, error) {
	fi, err := os.Stat(libPath)
	if err != nil {
		return nil, fmt.Errorf("NVML library: %w: is the NVIDIA driver installed? use --driver-root or --simulate", err)
	}
	// dlopen would block on a FIFO, and read a device for ever.
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("NVML library %s is %s, not a library: reinstall the driver, or name its root with --driver-root", libPath, filekind.Name(fi.Mode()))
	}
	return &Source{lib: nvml.New(nvml.WithLibraryPath(libPath)), path: libPath}, nil
}

// Host initialises NVML, reads every GPU and MIG device, and shuts NVML
// down again.
func (n *Source) Host() (*inventory.Host, error) {
	if ret := n.lib.Init(); ret != nvml.SUCCESS {
		lib := "NVML"
		if n.path != "" {
			lib = "NVML (" + n.path + ")"
		}
		return nil, fmt.Errorf("cannot load or initialise %s: %w: %s", lib, ret, initAdvice(ret, "is the NVIDIA driver installed? use --driver-root or --simulate"))
	}
	// The host has been read by the time Shutdown runs; a failure to
	// release the library changes nothing for the caller.
	defer n.lib.Shutdown()

	h := &inventory.Host{}
	var ret nvml.Return
	if h.DriverVersion, ret = n.lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: driver version: %w", ret)
	}
	cuda, ret := n.lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: CUDA driver version: %w", ret)
	}
	// NVML encodes CUDA 12.4 as 12040.
	h.CUDAVersion = fmt.Sprintf("%d.%d", cuda/1000, cuda%1000/10)
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: GPU count: %w", ret)
	}
	devs := make([]nvml.Device, count)
	for i := range count {
		dev, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: GPU %d: handle: %w", i, ret)
		}
		g, err := readGPU(dev)
		if err != nil {
			return nil, fmt.Errorf("NVML: GPU %d: %w", i, err)
		}
		devs[i] = dev
		h.GPUs = append(h.GPUs, *g)
	}
	if err := readDistances(h, devs); err != nil {
		return nil, fmt.Errorf("NVML: %w", err)
	}
	n.readNUMA(h, devs)
	n.readFabric(h, devs)
	h.Sort()
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("NVML: %w", err)
	}
	return h, nil
}

// readNUMA sets each GPU's NUMA node (devs and h.GPUs in the same order)
// where NVML reports one; Host.ReadNUMA reads sysfs for the others. NVML
// gained the call late (older drivers lack it): it is looked up first, as
// calling a symbol the library lacks would end the process. go-nvml's
// mocks (no library path) have no symbols to look up and are left alone.
func (n *Source) readNUMA(h *inventory.Host, devs []nvml.Device) {
	if n.path == "" || n.lib.Extensions().LookupSymbol("nvmlDeviceGetNumaNodeId") != nil {
		return
	}
	for i, dev := range devs {
		if node, ret := dev.GetNumaNodeId(); ret == nvml.SUCCESS && node >= 0 {
			h.GPUs[i].NUMANode = &node
		}
	}
}

// readFabric sets the clique of each GPU attached to an NVLink fabric
// (GB200 NVL72 and the like) whose registration completed, as GPU feature
// discovery's gpu.clique reads it. Older drivers lack the call: it is
// looked up first, as for readNUMA; go-nvml's mocks are asked directly.
func (n *Source) readFabric(h *inventory.Host, devs []nvml.Device) {
	if n.path != "" && n.lib.Extensions().LookupSymbol("nvmlDeviceGetGpuFabricInfo") != nil {
		return
	}
	for i, dev := range devs {
		f, ret := dev.GetGpuFabricInfo()
		if ret != nvml.SUCCESS || f.State != nvml.GPU_FABRIC_STATE_COMPLETED || nvml.Return(f.Status) != nvml.SUCCESS {
			continue
		}
		u := f.ClusterUuid
		h.GPUs[i].Clique = fmt.Sprintf("%x-%x-%x-%x-%x.%d", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16], f.CliqueId)
	}
}

// readDistances fills each GPU's distances to the others (devs and
// h.GPUs in the same order) from their closest common ancestor in the
// PCIe/NUMA tree. A driver or platform that cannot tell (NOT_SUPPORTED)
// leaves every distance unknown: a partial matrix would rank GPUs wrongly.
func readDistances(h *inventory.Host, devs []nvml.Device) error {
	if len(devs) < 2 {
		return nil // nothing to be closer to
	}
	dist := make([][]int, len(devs))
	for i := range devs {
		dist[i] = make([]int, len(devs))
		for j := range devs {
			if h.GPUs[j].Index >= len(devs) {
				return nil // indices with gaps: no place to put them
			}
			if i == j {
				continue
			}
			level, ret := devs[i].GetTopologyCommonAncestor(devs[j])
			if errors.Is(ret, nvml.ERROR_NOT_SUPPORTED) {
				return nil
			}
			if ret != nvml.SUCCESS {
				return fmt.Errorf("GPU %d: topology to GPU %d: %w", h.GPUs[i].Index, h.GPUs[j].Index, ret)
			}
			dist[i][h.GPUs[j].Index] = int(level)
		}
	}
	for i := range h.GPUs {
		h.GPUs[i].Distance = dist[i]
	}
	return nil
}

// field names the value a failed NVML call was reading.
func field(name string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return fmt.Errorf("%s: %w", name, ret)
}

func readGPU(dev nvml.Device) (*inventory.GPU, error) {
	var g inventory.GPU
	var ret nvml.Return
	if g.Index, ret = dev.GetIndex(); ret != nvml.SUCCESS {
		return nil, field("index", ret)
	}
	if g.Minor, ret = dev.GetMinorNumber(); ret != nvml.SUCCESS {
		return nil, field("minor number", ret)
	}
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return nil, field("uuid", ret)
	}
	if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return nil, field("name", ret)
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return nil, field("PCI info", ret)
	}
	g.PCIBusID = cString(pci.BusId[:])
	g.PCIDeviceID = pci.PciDeviceId
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, field("memory info", ret)
	}
	g.MemoryMiB = mem.Total / mib
	major, minor, ret := dev.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return nil, field("compute capability", ret)
	}
	g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)

	mode, _, ret := dev.GetMigMode()
	switch {
	case errors.Is(ret, nvml.ERROR_NOT_SUPPORTED):
		// A GPU without MIG support.
	case ret != nvml.SUCCESS:
		return nil, field("MIG mode", ret)
	default:
		g.MIGEnabled = mode == nvml.DEVICE_MIG_ENABLE
	}
	if !g.MIGEnabled {
		return &g, nil
	}
	slots, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, field("MIG device count", ret)
	}
	for slot := range slots {
		mig, ret := dev.GetMigDeviceHandleByIndex(slot)
		if errors.Is(ret, nvml.ERROR_NOT_FOUND) {
			continue // no MIG device in this slot
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: handle: %w", slot, ret)
		}
		m, err := readMIG(mig, slot, mem.Total)
		if err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", slot, err)
		}
		suffix, err := profileAttributes(dev, m.GI)
		if err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", slot, err)
		}
		m.Profile += suffix
		g.MIG = append(g.MIG, *m)
	}
	return &g, nil
}

const mib = 1 << 20

func readMIG(dev nvml.Device, slot int, parentMemory uint64) (*inventory.MIGDevice, error) {
	m := inventory.MIGDevice{Index: slot}
	var ret nvml.Return
	if m.GI, ret = dev.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return nil, field("GPU instance id", ret)
	}
	if m.CI, ret = dev.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return nil, field("compute instance id", ret)
	}
	if m.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return nil, field("uuid", ret)
	}
	attr, ret := dev.GetAttributes()
	if ret != nvml.SUCCESS {
		return nil, field("attributes", ret)
	}
	m.MemoryMiB = attr.MemorySizeMB
	m.SMCount = int(attr.MultiprocessorCount)
	m.Engines = inventory.Engines{
		Copy:    int(attr.SharedCopyEngineCount),
		Decoder: int(attr.SharedDecoderCount),
		Encoder: int(attr.SharedEncoderCount),
		JPEG:    int(attr.SharedJpegCount),
		OFA:     int(attr.SharedOfaCount),
	}
	m.Profile = migProfile(attr, parentMemory)
	return &m, nil
}

// migProfile names a MIG device the way nvidia-smi and NVIDIA's Kubernetes
// components do: "<g>g.<gb>gb", or "<c>c.<g>g.<gb>gb" when the compute
// instance holds fewer slices than its GPU instance. The memory is the
// instance's share of the GPU rounded up to eighths, times the GPU's memory
// in whole GB: a 1g instance of an 80 GB H100 has 9856 MiB yet is a
// "1g.10gb".
func migProfile(attr nvml.DeviceAttributes, parentMemory uint64) string {
	g, c := attr.GpuInstanceSliceCount, attr.ComputeInstanceSliceCount
	gb := memoryGB(attr.MemorySizeMB, parentMemory)
	if c == g {
		return fmt.Sprintf("%dg.%dgb", g, gb)
	}
	return fmt.Sprintf("%dc.%dg.%dgb", c, g, gb)
}

// memoryGB is the "gb" of a profile name: an instance's memory (MiB) as a
// share of the GPU's (bytes) rounded up to eighths, times the GPU's memory
// in whole GB.
func memoryGB(instanceMiB, gpuMemory uint64) uint64 {
	if gpuMemory == 0 {
		return 0
	}
	share := float64(instanceMiB*mib) / float64(gpuMemory)
	share = math.Ceil(share*8) / 8
	gpuGB := float64((gpuMemory + 1<<30 - 1) >> 30)
	return uint64(math.Round(share * gpuGB))
}

// suffixOf is what an NVML GPU instance profile adds to its plain
// profile's name: "+me" for NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, ...
func suffixOf(profile int) string {
	for _, p := range profileSuffixes {
		if p.profile == profile {
			return p.suffix
		}
	}
	return ""
}

// profileAttributes returns what the name of a MIG device's profile adds
// for its GPU instance's profile, as nvidia-smi, NVIDIA's device plugin
// and mig-parted name it: "+me" for a media-extension one (1g.5gb+me, whose
// instance has the GPU's JPEG decoder and optical flow engine), and on
// Blackwell "+me.all" (every media engine), "-me" (none) and "+gfx"
// (graphics). A MIG device's attributes are those of the plain profile,
// so only the GPU instance tells them apart. NVML answers that to root
// alone: without leave to ask, the name is the plain profile's.
func profileAttributes(gpu nvml.Device, gi int) (string, error) {
	inst, ret := gpu.GetGpuInstanceById(gi)
	if errors.Is(ret, nvml.ERROR_NO_PERMISSION) || errors.Is(ret, nvml.ERROR_NOT_SUPPORTED) {
		return "", nil
	}
	if ret != nvml.SUCCESS {
		return "", field(fmt.Sprintf("GPU instance %d", gi), ret)
	}
	info, ret := inst.GetInfo()
	if ret != nvml.SUCCESS {
		return "", field(fmt.Sprintf("GPU instance %d info", gi), ret)
	}
	// The instance names its profile by the GPU's id for it (nvidia-smi
	// mig -lgip's ID: on an A100 40GB, 19 for 1g.5gb and 20 for
	// 1g.5gb+me), not by NVML's profile constant.
	for _, p := range profileSuffixes {
		pi, ret := gpu.GetGpuInstanceProfileInfo(p.profile)
		if unsupported(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return "", field(fmt.Sprintf("GPU instance profile %d", p.profile), ret)
		}
		if pi.Id == info.ProfileId {
			return p.suffix, nil
		}
	}
	return "", nil
}

// profileSuffixes are NVML's GPU instance profiles whose names add to the
// plain profile's, with what they add.
var profileSuffixes = []struct {
	profile int
	suffix  string
}{
	{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, "+me"},
	{nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, "+me"},
	{nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, "+me.all"},
	{nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, "+me.all"},
	{nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, "-me"},
	{nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, "-me"},
	{nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, "+gfx"},
	{nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, "+gfx"},
	{nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, "+gfx"},
	{nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX, "+gfx"},
}

// cString returns the NUL-terminated string at the start of b.
func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// Load describes the host the way every gpuctk command does: from the
// simulated profile named by simulate (returning it too: its majors stand
// in for the driver's files), or, when simulate is "", from the NVML
// library found under driverRoot.
func Load(simulate, driverRoot string, opts ...driver.Option) (*inventory.Host, *inventory.Profile, error) {
	if simulate != "" {
		p, err := inventory.LoadProfile(simulate)
		if err != nil {
			return nil, nil, err
		}
		h, err := p.Host()
		return h, p, err
	}
	lib, err := driver.FindLibrary(driverRoot, "libnvidia-ml.so.1", opts...)
	if err != nil {
		return nil, nil, err
	}
	src, err := Open(lib)
	if err != nil {
		return nil, nil, err
	}
	h, err := src.Host()
	return h, nil, err
}

// initAdvice says what to do when NVML does not initialise: otherwise,
// except where the driver's libraries and its loaded kernel module are of
// different versions, as after a driver upgrade until the new module is
// loaded (the refresh unit runs then, on depmod, and again at the load).
func initAdvice(ret nvml.Return, otherwise string) string {
	if ret == nvml.ERROR_LIB_RM_VERSION_MISMATCH {
		return "the loaded NVIDIA kernel module is another version than the driver's libraries (the driver was upgraded or downgraded since it was loaded): reboot, or unload the nvidia modules and load them again"
	}
	return otherwise
}
