package nvmlhost

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/mig"
)

// MIG changes MIG modes and instances through NVML; it is the mig.Device
// of a real host. Close shuts NVML down.
type MIG struct {
	lib nvml.Interface
}

var _ mig.Device = (*MIG)(nil)

// MIG initialises NVML and returns the host's mig.Device.
func (n *Source) MIG() (*MIG, error) {
	if ret := n.lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("cannot load or initialise NVML: %w: %s", ret, initAdvice(ret, "is the NVIDIA driver installed?"))
	}
	return &MIG{lib: n.lib}, nil
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

// computeProfiles maps a compute instance's slice count to NVML's compute
// instance profile.
var computeProfiles = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

// CreateComputeInstance creates the compute instance that spans GPU
// instance id.
func (m *MIG) CreateComputeInstance(uuid string, id int, p *mig.Profile) error {
	d, err := m.device(uuid)
	if err != nil {
		return err
	}
	gi, ret := d.GetGpuInstanceById(id)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: GPU instance %d: %w", id, ret)
	}
	cp, ok := computeProfiles[p.ComputeSlices]
	if !ok {
		return errors.New("no compute instance profile spans " + p.Name)
	}
	info, ret := gi.GetComputeInstanceProfileInfo(cp, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: compute instance profile of %s: %w", p.Name, ret)
	}
	if _, ret := gi.CreateComputeInstance(&info); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: create compute instance: %w", ret)
	}
	return nil
}
