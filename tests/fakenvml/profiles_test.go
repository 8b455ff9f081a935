package fakenvml_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/mig"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
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
	dev := nvmlMIG(t)
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

// TestUnknownModelThroughNVML partitions a GPU gpuctk has no model data
// for (an H200 whose name and PCI device id the data does not know): the
// plan takes the driver's profiles, and apply makes the MIG devices. With
// MIG off, when the driver tells no profile, the plan says so and sets
// the mode only; apply then places the instances from the profiles the
// driver tells once the mode is on.
func TestUnknownModelThroughNVML(t *testing.T) {
	cfg, err := mig.ParseConfig("c.yaml", []byte("version: v1\nmig-configs:\n  all-1g.18gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.18gb\": 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		enabled bool
		plan    string
	}{
		{"MIG on", true, "GPU 0 (NVIDIA H300 Future, GPU-6c1a9f3e-0000-4000-8000-000000000001): MIG enabled, no MIG devices -> MIG enabled: 7 x 1g.18gb\n" +
			"  create GPU instance 7 (1g.18gb, memory slice 0) with one compute instance"},
		{"MIG off", false, "GPU 0 (NVIDIA H300 Future, GPU-6c1a9f3e-0000-4000-8000-000000000001): MIG disabled -> MIG enabled: 7 x 1g.18gb\n" +
			"  note: the driver reports MIG profiles only with MIG mode on and gpuctk has no model data for this GPU: MIG mode is enabled first, then the instances are planned from the driver's profiles\n" +
			"  set MIG mode enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := mig.ModelOf(&inventory.GPU{Name: "NVIDIA H200"})
			h := modelGPU(*m, tc.enabled)
			h.GPUs[0].MemoryMiB = 143771 // as NVML reports an H200's
			useHost(t, h)
			path := os.Getenv(fakenvml.EnvVar)
			data, _ := os.ReadFile(path)
			data = bytes.ReplaceAll(data, []byte("NVIDIA H200"), []byte("NVIDIA H300 Future"))
			data = bytes.ReplaceAll(data, []byte("pci 0x233510DE"), []byte("pci 0x2FFF10DE"))
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			host := nvmlHost(t)
			if _, known := mig.ModelOf(&host.GPUs[0]); known {
				t.Fatalf("%s is known to the model data", host.GPUs[0].Name)
			}
			if _, err := mig.Compute(host, cfg, "all-1g.18gb"); err == nil {
				t.Error("the model data planned a GPU it does not know")
			}
			dev := nvmlMIG(t)
			defer dev.Close()
			p, err := mig.Compute(host, cfg, "all-1g.18gb", mig.WithProfiles(dev))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(p.Lines(), "\n"); !strings.HasPrefix(got, tc.plan) {
				t.Errorf("plan:\n%s\nwant it to start:\n%s", got, tc.plan)
			}
			if err := mig.Apply(p, dev); err != nil {
				t.Fatal(err)
			}
			after := nvmlHost(t)
			var got []string
			for _, d := range after.GPUs[0].MIG {
				got = append(got, fmt.Sprintf("%d:%s:%d", d.GI, d.Profile, d.SMCount))
			}
			if want := "7:1g.18gb:16 8:1g.18gb:16 9:1g.18gb:16 10:1g.18gb:16 11:1g.18gb:16 12:1g.18gb:16 13:1g.18gb:16"; strings.Join(got, " ") != want {
				t.Errorf("MIG devices %v, want %s", got, want)
			}
		})
	}
}

// TestComputeProfilesThroughNVML creates a GPU instance of each profile of
// each model through NVML and reads back the compute instance profile
// that spans it (nvmlGpuInstanceGetComputeInstanceProfileInfoV, as
// nvidia-smi mig -lcip lists it): its slices, SMs, engines and name are
// the GPU instance profile's, and the compute instance made of it is the
// MIG device of that profile.
func TestComputeProfilesThroughNVML(t *testing.T) {
	for _, m := range mig.Models() {
		for _, p := range m.Profiles {
			t.Run(m.Name+"/"+p.Name, func(t *testing.T) {
				h := modelGPU(m, true)
				useHost(t, h)
				uuid := h.GPUs[0].UUID
				dev := nvmlMIG(t)
				gi, err := dev.CreateGPUInstance(uuid, &p, p.Starts[0])
				if err != nil {
					dev.Close()
					t.Fatal(err)
				}
				got, err := dev.ComputeProfile(uuid, gi)
				if err == nil {
					err = dev.CreateComputeInstance(uuid, gi, &p)
				}
				dev.Close()
				if err != nil {
					t.Fatal(err)
				}
				want := nvmlhost.ComputeProfile{ID: got.ID, Name: p.Name, Slices: p.ComputeSlices, SMCount: p.SMCount, Engines: p.Engines}
				if *got != want || got.ID >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
					t.Errorf("compute instance profile %+v, want %+v", *got, want)
				}
				migs := nvmlHost(t).GPUs[0].MIG
				// The MIG device's name follows the GPU's memory, which
				// modelGPU does not give as the model's GPU has it.
				if len(migs) != 1 || migs[0].GI != gi || migs[0].SMCount != p.SMCount || migs[0].MemoryMiB != p.MemoryMiB || migs[0].Engines != p.Engines {
					t.Errorf("MIG devices %+v, want one of %d SMs, %d MiB, engines %+v in GPU instance %d", migs, p.SMCount, p.MemoryMiB, p.Engines, gi)
				}
			})
		}
	}
}

// TestComputeProfileRefused: a driver that refuses the compute instance
// profile query still gets its compute instances, of NVML's profile for
// their slice count, and the caller one note per GPU saying so.
func TestComputeProfileRefused(t *testing.T) {
	m, _ := mig.ModelOf(&inventory.GPU{Name: "NVIDIA H200"})
	h := modelGPU(*m, false)
	h.GPUs[0].MemoryMiB = 143771 // as NVML reports an H200's
	useHost(t, h, fakenvml.Fault{Function: "nvmlGpuInstanceGetComputeInstanceProfileInfoV", GPU: -1, Return: nvml.ERROR_NO_PERMISSION})
	cfg, err := mig.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	p, err := mig.Compute(nvmlHost(t), cfg, "all-1g.18gb")
	if err != nil {
		t.Fatal(err)
	}
	src, err := nvmlhost.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	dev, err := src.MIG(nvmlhost.WithNote(func(n string) { notes = append(notes, n) }))
	if err != nil {
		t.Fatal(err)
	}
	err = mig.Apply(p, dev)
	dev.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := "GPU " + h.GPUs[0].UUID + ": NVML: compute instance profile 0 of GPU instance 7: Insufficient Permissions: its compute instances take NVML's compute instance profile for their slice count"
	if len(notes) != 1 || notes[0] != want {
		t.Errorf("notes %q, want one: %q", notes, want)
	}
	var got []string
	for _, d := range nvmlHost(t).GPUs[0].MIG {
		got = append(got, fmt.Sprintf("%d:%s:%d", d.GI, d.Profile, d.SMCount))
	}
	if want := "7:1g.18gb:16 8:1g.18gb:16 9:1g.18gb:16 10:1g.18gb:16 11:1g.18gb:16 12:1g.18gb:16 13:1g.18gb:16"; strings.Join(got, " ") != want {
		t.Errorf("MIG devices %v, want %s", got, want)
	}
}
