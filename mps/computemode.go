package mps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/internal/atomicfile"

	"github.com/gpuctk/gpuctk/offer"
)

// Compute modes, as NVML numbers them.
const (
	ComputeModeDefault          = int(nvml.COMPUTEMODE_DEFAULT)
	ComputeModeExclusiveProcess = int(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
)

// ComputeModer reads and sets the compute mode of a GPU named by UUID.
type ComputeModer interface {
	ComputeMode(uuid string) (int, error)
	SetComputeMode(uuid string, mode int) error
}

// NVMLComputeMode is the ComputeModer of real hosts. NVML is initialised
// on first use and stays initialised for the life of the process.
type NVMLComputeMode struct {
	lib  nvml.Interface
	once sync.Once
	err  error
}

// NewNVMLComputeMode returns a ComputeModer that calls lib: production
// code passes nvml.New(...), tests go-nvml's mocks.
func NewNVMLComputeMode(lib nvml.Interface) *NVMLComputeMode {
	return &NVMLComputeMode{lib: lib}
}

func (n *NVMLComputeMode) device(uuid string) (nvml.Device, error) {
	n.once.Do(func() {
		if ret := n.lib.Init(); ret != nvml.SUCCESS {
			n.err = fmt.Errorf("cannot initialise NVML to set compute modes: %w: pass --no-compute-mode or set [mps] set-compute-mode = false to leave them alone", ret)
		}
	})
	if n.err != nil {
		return nil, n.err
	}
	dev, ret := n.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: GPU %s: %w", uuid, ret)
	}
	return dev, nil
}

// ComputeMode returns the GPU's compute mode.
func (n *NVMLComputeMode) ComputeMode(uuid string) (int, error) {
	dev, err := n.device(uuid)
	if err != nil {
		return 0, err
	}
	mode, ret := dev.GetComputeMode()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("NVML: GPU %s: compute mode: %w", uuid, ret)
	}
	return int(mode), nil
}

// SetComputeMode sets the GPU's compute mode.
func (n *NVMLComputeMode) SetComputeMode(uuid string, mode int) error {
	dev, err := n.device(uuid)
	if err != nil {
		return err
	}
	if ret := dev.SetComputeMode(nvml.ComputeMode(mode)); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: GPU %s: set compute mode %s: %w", uuid, ComputeModeName(mode), ret)
	}
	return nil
}

// ComputeModeName returns the name nvidia-smi uses for a compute mode.
func ComputeModeName(mode int) string {
	switch nvml.ComputeMode(mode) {
	case nvml.COMPUTEMODE_DEFAULT:
		return "DEFAULT"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "EXCLUSIVE_THREAD"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "PROHIBITED"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "EXCLUSIVE_PROCESS"
	}
	return fmt.Sprintf("mode %d", mode)
}

// modePath is where the mode a GPU had before its first daemon started is
// kept until its last daemon stops.
func (m *Manager) modePath(gpuUUID string) string {
	return filepath.Join(m.stateRoot, "compute-mode", gpuUUID)
}

// holdComputeMode puts d's GPU in EXCLUSIVE_PROCESS mode, remembering the
// mode it had unless a daemon on that GPU already holds it.
func (m *Manager) holdComputeMode(d *offer.Share) error {
	if m.modes == nil {
		return nil
	}
	gpu := d.GPU.UUID
	path := m.modePath(gpu)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		prev, err := m.modes.ComputeMode(gpu)
		if err != nil {
			return err
		}
		if prev == ComputeModeExclusiveProcess {
			return nil // nothing to restore
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("MPS state: %w", err)
		}
		if err := atomicfile.WriteFile(path, []byte(strconv.Itoa(prev)+"\n"), 0o644); err != nil {
			return fmt.Errorf("MPS state: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("MPS state: %w", err)
	}
	if err := m.modes.SetComputeMode(gpu, ComputeModeExclusiveProcess); err != nil {
		return fmt.Errorf("GPU %s: %w", gpu, err)
	}
	return nil
}

// releaseComputeMode restores the mode of d's GPU once no daemon gpuctk
// started on that GPU remains (d's own record is gone by now).
func (m *Manager) releaseComputeMode(d *offer.Share) error {
	return m.releaseGPU(d.GPU.UUID)
}

// releaseLeftComputeModes restores the saved mode of every GPU on which no
// daemon gpuctk started remains: one whose restore failed at an earlier
// stop, or whose daemon's record is gone.
func (m *Manager) releaseLeftComputeModes() error {
	if m.modes == nil {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(m.stateRoot, "compute-mode"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("MPS state: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			errs = append(errs, m.releaseGPU(e.Name()))
		}
	}
	return errors.Join(errs...)
}

// releaseGPU restores the saved mode of the GPU gpu unless a daemon gpuctk
// started on it remains.
func (m *Manager) releaseGPU(gpu string) error {
	if m.modes == nil {
		return nil
	}
	path := m.modePath(gpu)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("MPS state: %w", err)
	}
	others, broken, err := m.started()
	if err != nil {
		return err
	}
	if len(broken) > 0 {
		// A record that cannot be read may be of a daemon on this GPU:
		// its mode is kept (the broken record is reported) until the
		// record is dealt with.
		return nil
	}
	for _, o := range others {
		if o.GPU.UUID == gpu {
			return nil
		}
	}
	prev, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("MPS state %s: %w", path, err)
	}
	if err := m.modes.SetComputeMode(gpu, prev); err != nil {
		return fmt.Errorf("GPU %s: restore compute mode: %w", gpu, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("MPS state: %w", err)
	}
	return nil
}
