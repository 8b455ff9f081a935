package fakenvml_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/mig"
)

// modelGPU is a GPU of model m as NVML reports it, with MIG on or off.
func modelGPU(m mig.Model, enabled bool) *inventory.Host {
	return &inventory.Host{DriverVersion: "580.65.06", CUDAVersion: "13.0", GPUs: []inventory.GPU{{
		Index: 0, UUID: "GPU-6c1a9f3e-0000-4000-8000-000000000001", Name: m.Products[0], PCIBusID: "00000000:19:00.0",
		PCIDeviceID: m.PCIDeviceIDs[0], MemoryMiB: 81559, ComputeCapability: "9.0", MIGEnabled: enabled,
	}}}
}

// nvmlModel reads GPU 0's MIG profiles through go-nvml and the library.
func nvmlModel(t *testing.T, h *inventory.Host) (*mig.Model, error) {
	t.Helper()
	src, err := nvmlhost.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := src.MIG()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	return dev.Model(&h.GPUs[0])
}

// TestModelsThroughNVML reads each model's profiles back through the NVML
// path (nvmlDeviceGetGpuInstanceProfileInfoV, ..PossiblePlacements_v2)
// from the library that answers with the model file's: names with their
// +me suffixes, slices, memory, SMs, engines, instance counts and
// placements come back as the file has them, so a GPU without model data
// plans from NVML alone.
func TestModelsThroughNVML(t *testing.T) {
	for _, want := range mig.Models() {
		t.Run(want.Name, func(t *testing.T) {
			h := modelGPU(want, true)
			useHost(t, h)
			got, err := nvmlModel(t, h)
			if err != nil {
				t.Fatal(err)
			}
			if got.ComputeSlices != want.ComputeSlices || got.MemorySlices != want.MemorySlices ||
				!reflect.DeepEqual(got.PCIDeviceIDs, want.PCIDeviceIDs[:1]) || !reflect.DeepEqual(got.Products, want.Products[:1]) {
				t.Errorf("model %+v, want slices %d/%d, PCI id %#x, product %s", got, want.ComputeSlices, want.MemorySlices, want.PCIDeviceIDs[0], want.Products[0])
			}
			if !reflect.DeepEqual(got.Profiles, want.Profiles) {
				t.Errorf("profiles through NVML:\n%+v\nmodel file:\n%+v", got.Profiles, want.Profiles)
			}
		})
	}
}

// TestModelNeedsMIGMode: with MIG off the library answers no profile, as
// drivers that report them only in MIG mode do; Model says so.
func TestModelNeedsMIGMode(t *testing.T) {
	m, _ := mig.ModelOf(&inventory.GPU{Name: "NVIDIA H200"})
	h := modelGPU(*m, false)
	useHost(t, h)
	if _, err := nvmlModel(t, h); !errors.Is(err, mig.ErrNeedsMIGMode) {
		t.Errorf("error %v, want %v", err, mig.ErrNeedsMIGMode)
	}
}
