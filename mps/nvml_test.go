package mps

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestNVMLComputeMode(t *testing.T) {
	mode := nvml.COMPUTEMODE_DEFAULT
	inits := 0
	dev := &mock.Device{
		GetComputeModeFunc: func() (nvml.ComputeMode, nvml.Return) { return mode, nvml.SUCCESS },
		SetComputeModeFunc: func(m nvml.ComputeMode) nvml.Return { mode = m; return nvml.SUCCESS },
	}
	lib := &mock.Interface{
		InitFunc: func() nvml.Return { inits++; return nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			if uuid == "GPU-a" {
				return dev, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
	c := NewNVMLComputeMode(lib)
	if err := c.SetComputeMode("GPU-a", ComputeModeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ComputeMode("GPU-a"); err != nil || got != ComputeModeExclusiveProcess {
		t.Fatalf("ComputeMode = %d, %v", got, err)
	}
	if inits != 1 {
		t.Errorf("NVML initialised %d times", inits)
	}
	if _, err := c.ComputeMode("GPU-b"); err == nil || !strings.HasPrefix(err.Error(), "NVML: GPU GPU-b: ") {
		t.Errorf("unknown GPU: err = %v", err)
	}
	dev.SetComputeModeFunc = func(nvml.ComputeMode) nvml.Return { return nvml.ERROR_NO_PERMISSION }
	if err := c.SetComputeMode("GPU-a", ComputeModeDefault); err == nil || !strings.HasPrefix(err.Error(), "NVML: GPU GPU-a: set compute mode DEFAULT: ") {
		t.Errorf("refused: err = %v", err)
	}

	noLib := NewNVMLComputeMode(&mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }})
	_, err := noLib.ComputeMode("GPU-a")
	if err == nil || !strings.HasPrefix(err.Error(), "cannot initialise NVML to set compute modes: ") || !strings.HasSuffix(err.Error(), "pass --no-compute-mode or set [mps] set-compute-mode = false to leave them alone") {
		t.Errorf("no NVML: err = %v", err)
	}
}
