package nvmlhost

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/mig"
)

// MIG changes MIG modes and instances through NVML; it is the mig.Device
// of a real host. Close shuts NVML down.
type MIG struct {
	lib nvml.Interface
	// real: lib is a loaded library (Open), whose symbols can be looked
	// up; go-nvml's mocks have none.
	real bool
	// note says what the caller should know, once per GPU (noted).
	note  func(string)
	noted map[string]bool
}

var _ mig.Device = (*MIG)(nil)

// MIGOption changes how MIG works.
type MIGOption func(*MIG)

// WithNote hands note the line that says a GPU's driver did not tell a
// compute instance profile and the one gpuctk took instead; by default
// nothing is said.
func WithNote(note func(string)) MIGOption {
	return func(m *MIG) { m.note = note }
}

// MIG initialises NVML and returns the host's mig.Device.
func (n *Source) MIG(opts ...MIGOption) (*MIG, error) {
	if ret := n.lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("cannot load or initialise NVML: %w: %s", ret, initAdvice(ret, "is the NVIDIA driver installed?"))
	}
	m := &MIG{lib: n.lib, real: n.path != "", note: func(string) {}, noted: map[string]bool{}}
	for _, o := range opts {
		o(m)
	}
	return m, nil
}

// has reports whether the library exports symbol: calling one it lacks
// (a V call of a driver older than it) ends the process. go-nvml's mocks
// have no symbols and answer the unversioned calls only.
func (m *MIG) has(symbol string) bool {
	return m.real && m.lib.Extensions().LookupSymbol(symbol) == nil
}

// Close shuts NVML down.
func (m *MIG) Close() { m.lib.Shutdown() }

func (m *MIG) device(uuid string) (nvml.Device, error) {
	d, ret := m.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: GPU %s: handle: %w", uuid, ret)
	}
	return d, nil
}

// Busy reports the GPU's compute processes.
func (m *MIG) Busy(uuid string) (string, error) {
	d, err := m.device(uuid)
	if err != nil {
		return "", err
	}
	procs, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("NVML: compute processes: %w", ret)
	}
	if len(procs) == 0 {
		return "", nil
	}
	var pids []string
	for _, p := range procs {
		pids = append(pids, fmt.Sprint(p.Pid))
	}
	return fmt.Sprintf("%d compute processes run on it (pids %s)", len(procs), strings.Join(pids, ", ")), nil
}

// SetMIGMode enables or disables MIG mode.
func (m *MIG) SetMIGMode(uuid string, enabled bool) error {
	d, err := m.device(uuid)
	if err != nil {
		return err
	}
	mode := nvml.DEVICE_MIG_DISABLE
	if enabled {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	activation, ret := d.SetMigMode(mode)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: set MIG mode: %w", ret)
	}
	if activation != nvml.SUCCESS {
		return fmt.Errorf("NVML: MIG mode is pending (%w): reset the GPU (nvidia-smi -r) or reboot, then apply again", activation)
	}
	return nil
}

// Model reads the GPU's GPU instance profiles from NVML: name, slices,
// memory, SMs, engines, instance count and placements, so that a GPU
// gpuctk has no model data for plans and applies. Drivers that report
// profiles only with MIG mode on answer none while it is off: that is
// mig.ErrNeedsMIGMode.
func (m *MIG) Model(g *inventory.GPU) (*mig.Model, error) {
	d, err := m.device(g.UUID)
	if err != nil {
		return nil, err
	}
	current, _, ret := d.GetMigMode()
	if errors.Is(ret, nvml.ERROR_NOT_SUPPORTED) {
		return nil, fmt.Errorf("the %s does not support MIG", g.Name)
	}
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: MIG mode: %w", ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: memory info: %w", ret)
	}
	// The V call names the profile as nvidia-smi does; drivers before
	// it (R470) lack it.
	named := m.has("nvmlDeviceGetGpuInstanceProfileInfoV")
	var profiles []mig.Profile
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		p, err := readProfile(d, id, named, mem.Total)
		if err != nil {
			return nil, fmt.Errorf("NVML: GPU instance profile %d: %w", id, err)
		}
		if p != nil {
			profiles = append(profiles, *p)
		}
	}
	if len(profiles) == 0 {
		if current != nvml.DEVICE_MIG_ENABLE {
			return nil, fmt.Errorf("GPU %d (%s): %w", g.Index, g.Name, mig.ErrNeedsMIGMode)
		}
		return nil, fmt.Errorf("NVML reports no MIG profile of the %s", g.Name)
	}
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: PCI info: %w", ret)
	}
	return mig.NewModel(strings.TrimPrefix(g.Name, "NVIDIA "), []string{g.Name}, []uint32{pci.PciDeviceId}, profiles)
}

// readProfile reads GPU instance profile id (an NVML_GPU_INSTANCE_PROFILE_*
// constant): nil when the GPU lacks it.
func readProfile(d nvml.Device, id int, named bool, gpuMemory uint64) (*mig.Profile, error) {
	var info nvml.GpuInstanceProfileInfo
	var name string
	if named {
		v2, ret := d.GetGpuInstanceProfileInfoV(id).V2()
		if unsupported(ret) {
			return nil, nil
		}
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		info = nvml.GpuInstanceProfileInfo{Id: v2.Id, SliceCount: v2.SliceCount, InstanceCount: v2.InstanceCount,
			MultiprocessorCount: v2.MultiprocessorCount, CopyEngineCount: v2.CopyEngineCount, DecoderCount: v2.DecoderCount,
			EncoderCount: v2.EncoderCount, JpegCount: v2.JpegCount, OfaCount: v2.OfaCount, MemorySizeMB: v2.MemorySizeMB}
		name = strings.TrimPrefix(cString(v2.Name[:]), "MIG ")
	} else {
		var ret nvml.Return
		info, ret = d.GetGpuInstanceProfileInfo(id)
		if unsupported(ret) {
			return nil, nil
		}
		if ret != nvml.SUCCESS {
			return nil, ret
		}
	}
	placements, ret := d.GetGpuInstancePossiblePlacements(&info)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("placements: %w", ret)
	}
	if len(placements) == 0 {
		return nil, errors.New("no placement")
	}
	p := &mig.Profile{
		Name: name, ID: id, ComputeSlices: int(info.SliceCount), MemorySlices: int(placements[0].Size),
		MemoryMiB: info.MemorySizeMB, SMCount: int(info.MultiprocessorCount), Instances: int(info.InstanceCount),
		Engines: inventory.Engines{Copy: int(info.CopyEngineCount), Decoder: int(info.DecoderCount),
			Encoder: int(info.EncoderCount), JPEG: int(info.JpegCount), OFA: int(info.OfaCount)},
	}
	for _, pl := range placements {
		p.Starts = append(p.Starts, int(pl.Start))
	}
	if p.Name == "" {
		// As nvidia-smi names it: slices, memory share, attributes.
		p.Name = fmt.Sprintf("%dg.%dgb", p.ComputeSlices, memoryGB(p.MemoryMiB, gpuMemory)) + suffixOf(id)
	}
	return p, nil
}

// unsupported is what NVML answers for a profile the GPU lacks.
func unsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT
}

// GPUInstances lists the ids of the GPU's GPU instances, of every profile.
func (m *MIG) GPUInstances(uuid string) ([]int, error) {
	d, err := m.device(uuid)
	if err != nil {
		return nil, err
	}
	var ids []int
	for p := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.GetGpuInstanceProfileInfo(p)
		if unsupported(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: GPU instance profile %d: %w", p, ret)
		}
		gis, ret := d.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: GPU instances of profile %d: %w", p, ret)
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("NVML: GPU instance info: %w", ret)
			}
			ids = append(ids, int(gii.Id))
		}
	}
	return ids, nil
}

// DestroyGPUInstance destroys the GPU instance's compute instances, then
// the instance.
func (m *MIG) DestroyGPUInstance(uuid string, id int) error {
	d, err := m.device(uuid)
	if err != nil {
		return err
	}
	gi, ret := d.GetGpuInstanceById(id)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: GPU instance %d: %w", id, ret)
	}
	for p := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(p, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if unsupported(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("NVML: compute instance profile %d: %w", p, ret)
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("NVML: compute instances: %w", ret)
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				return fmt.Errorf("NVML: destroy compute instance: %w", ret)
			}
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: destroy GPU instance %d: %w", id, ret)
	}
	return nil
}

// CreateGPUInstance creates a GPU instance of profile p at start.
func (m *MIG) CreateGPUInstance(uuid string, p *mig.Profile, start int) (int, error) {
	d, err := m.device(uuid)
	if err != nil {
		return 0, err
	}
	info, ret := d.GetGpuInstanceProfileInfo(p.ID)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("NVML: GPU instance profile %s: %w", p.Name, ret)
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.MemorySlices)})
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("NVML: create GPU instance: %w", ret)
	}
	gii, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("NVML: GPU instance info: %w", ret)
	}
	return int(gii.Id), nil
}

// ComputeProfile is a compute instance profile of a GPU instance as the
// driver reports it (nvmlGpuInstanceGetComputeInstanceProfileInfoV), a
// line of nvidia-smi mig -lcip.
type ComputeProfile struct {
	// ID is NVML's compute instance profile (NVML_COMPUTE_INSTANCE_PROFILE_*).
	ID int
	// Name is the profile's name as nvidia-smi prints it, without "MIG "
	// ("1g.18gb"); empty from drivers without the V call.
	Name    string
	Slices  int
	SMCount int
	// Engines are those its compute instances share with the GPU
	// instance's other compute instances.
	Engines inventory.Engines
}

// ComputeProfile reads the compute instance profile that spans GPU
// instance id, the one gpuctk creates there: of NVML's compute instance
// profiles, the first with as many slices as the GPU instance has.
func (m *MIG) ComputeProfile(uuid string, id int) (*ComputeProfile, error) {
	d, err := m.device(uuid)
	if err != nil {
		return nil, err
	}
	gi, ret := d.GetGpuInstanceById(id)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: GPU instance %d: %w", id, ret)
	}
	return m.spanning(d, gi, id)
}

// spanning is ComputeProfile for the GPU instance gi (id) of GPU d.
func (m *MIG) spanning(d nvml.Device, gi nvml.GpuInstance, id int) (*ComputeProfile, error) {
	gii, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: GPU instance %d info: %w", id, ret)
	}
	gip, ret := d.GetGpuInstanceProfileInfo(int(gii.ProfileId))
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: GPU instance profile %d of GPU instance %d: %w", gii.ProfileId, id, ret)
	}
	named := m.has("nvmlGpuInstanceGetComputeInstanceProfileInfoV")
	for p := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		cp, ret := readComputeProfile(gi, p, named)
		if unsupported(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: compute instance profile %d of GPU instance %d: %w", p, id, ret)
		}
		if cp.Slices == int(gip.SliceCount) {
			return cp, nil
		}
	}
	return nil, fmt.Errorf("NVML reports no compute instance profile of %d slices for GPU instance %d", gip.SliceCount, id)
}

// readComputeProfile reads compute instance profile p (an
// NVML_COMPUTE_INSTANCE_PROFILE_* constant) of gi, with its name where
// the driver has the V call (named).
func readComputeProfile(gi nvml.GpuInstance, p int, named bool) (*ComputeProfile, nvml.Return) {
	var info nvml.ComputeInstanceProfileInfo
	var name string
	var ret nvml.Return
	if named {
		var v2 nvml.ComputeInstanceProfileInfo_v2
		v2, ret = gi.GetComputeInstanceProfileInfoV(p, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED).V2()
		info = nvml.ComputeInstanceProfileInfo{Id: v2.Id, SliceCount: v2.SliceCount, MultiprocessorCount: v2.MultiprocessorCount,
			SharedCopyEngineCount: v2.SharedCopyEngineCount, SharedDecoderCount: v2.SharedDecoderCount,
			SharedEncoderCount: v2.SharedEncoderCount, SharedJpegCount: v2.SharedJpegCount, SharedOfaCount: v2.SharedOfaCount}
		name = strings.TrimPrefix(cString(v2.Name[:]), "MIG ")
	} else {
		info, ret = gi.GetComputeInstanceProfileInfo(p, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	}
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return &ComputeProfile{ID: int(info.Id), Name: name, Slices: int(info.SliceCount), SMCount: int(info.MultiprocessorCount),
		Engines: inventory.Engines{Copy: int(info.SharedCopyEngineCount), Decoder: int(info.SharedDecoderCount),
			Encoder: int(info.SharedEncoderCount), JPEG: int(info.SharedJpegCount), OFA: int(info.SharedOfaCount)}}, nvml.SUCCESS
}

// bySlices maps a compute instance's slice count to NVML's compute
// instance profile: what gpuctk creates where the driver does not tell
// its profiles.
var bySlices = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// CreateComputeInstance creates the compute instance that spans GPU
// instance id, of the profile the driver reports for it (ComputeProfile).
// A driver that does not tell it gets the profile of p's slice count, and
// the caller one note per GPU.
func (m *MIG) CreateComputeInstance(uuid string, id int, p *mig.Profile) error {
	d, err := m.device(uuid)
	if err != nil {
		return err
	}
	gi, ret := d.GetGpuInstanceById(id)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: GPU instance %d: %w", id, ret)
	}
	cp, err := m.spanning(d, gi, id)
	if err != nil {
		fallback, ok := bySlices[p.ComputeSlices]
		if !ok {
			return fmt.Errorf("no compute instance profile spans %s: %w", p.Name, err)
		}
		if !m.noted[uuid] {
			m.noted[uuid] = true
			m.note(fmt.Sprintf("GPU %s: %v: its compute instances take NVML's compute instance profile for their slice count", uuid, err))
		}
		cp = &ComputeProfile{ID: fallback}
	}
	// NVML reads only the profile id.
	if _, ret := gi.CreateComputeInstance(&nvml.ComputeInstanceProfileInfo{Id: uint32(cp.ID)}); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: create compute instance of profile %d: %w", cp.ID, ret)
	}
	return nil
}
