package fakenvml_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/mig"
	"github.com/gpuctk/gpuctk/tests/fakehost"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
)

// nvmlHost reads the host through NVML, as a new process would.
func nvmlHost(t *testing.T) *inventory.Host {
	t.Helper()
	src, err := nvmlhost.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	h, err := src.Host()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// nvmlApply plans layout on the host NVML reports and applies it through
// NVML.
func nvmlApply(t *testing.T, layout string, opts ...mig.ApplyOption) (*mig.Plan, error) {
	t.Helper()
	cfg, err := mig.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	p, err := mig.Compute(nvmlHost(t), cfg, layout)
	if err != nil {
		t.Fatal(err)
	}
	dev := nvmlMIG(t)
	defer dev.Close()
	return p, mig.Apply(p, dev, opts...)
}

// nvmlMIG opens the library's mig.Device; the caller closes it, which
// lets the library read the host file again at the next open.
func nvmlMIG(t *testing.T) *nvmlhost.MIG {
	t.Helper()
	src, err := nvmlhost.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := src.MIG()
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// simulatedApply applies layout to a copy of an embedded profile.
func simulatedApply(t *testing.T, profile, layout string) *inventory.Host {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "inventory", "profiles", profile+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), profile+".toml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := mig.OpenSimulator(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := mig.LoadConfig("")
	h, _ := s.Host()
	p, err := mig.Compute(h, cfg, layout)
	if err != nil {
		t.Fatal(err)
	}
	if err := mig.Apply(p, s); err != nil {
		t.Fatal(err)
	}
	h, _ = s.Host()
	return h
}

// withoutMIGUUIDs blanks MIG devices' UUIDs, which NVML and the simulator
// choose each in their own way.
func withoutMIGUUIDs(h *inventory.Host) *inventory.Host {
	for i := range h.GPUs {
		for j := range h.GPUs[i].MIG {
			h.GPUs[i].MIG[j].UUID = ""
		}
	}
	return h
}

// TestMIGApplyThroughNVML applies layouts through go-nvml and the fake
// library: a new NVML session then reports the MIG devices the simulated
// apply makes (profiles, memory, SMs, GPU instance ids, MIG indices), and
// a second apply has nothing to do.
func TestMIGApplyThroughNVML(t *testing.T) {
	for _, tc := range []struct{ profile, layout string }{
		{"dgx-a100", "all-balanced"},
		{"dgx-a100", "all-1g.5gb"},
		{"dgx-a100", "all-disabled"},
		{"h100", "all-3g.40gb"},
		{"dgx-h100-mig", "all-balanced"},
	} {
		t.Run(tc.profile+"/"+tc.layout, func(t *testing.T) {
			useHost(t, fakehost.Host(t, tc.profile))
			if _, err := nvmlApply(t, tc.layout); err != nil {
				t.Fatal(err)
			}
			got := nvmlHost(t)
			want := simulatedApply(t, tc.profile, tc.layout)
			if !reflect.DeepEqual(withoutMIGUUIDs(got), withoutMIGUUIDs(want)) {
				t.Errorf("NVML host after apply:\n%+v\nsimulated:\n%+v", got, want)
			}
			p, err := nvmlApply(t, tc.layout)
			if err != nil || !p.Empty() {
				t.Errorf("second apply: %v\n%s", err, strings.Join(p.Lines(), "\n"))
			}
		})
	}
}

// TestMIGApplyRefusesBusyGPU puts a compute process on a GPU to change:
// apply refuses before changing anything.
func TestMIGApplyRefusesBusyGPU(t *testing.T) {
	useHost(t, fakehost.Host(t, "dgx-a100"))
	path := os.Getenv(fakenvml.EnvVar)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("proc 6 4242\nproc 6 4243\n")
	f.Close()
	before, _ := os.ReadFile(path)
	_, err = nvmlApply(t, "all-1g.5gb")
	want := "GPU 6 (GPU-9ae25e83-2fb9-7d25-982c-9aa33cf40ea7): 2 compute processes run on it (pids 4242, 4243): stop them before changing its MIG layout; nothing was changed"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the host changed")
	}
}

// TestMIGApplyConvergesThroughNVML makes NVML fail half-way through an
// apply; once the fault is gone, applying again reaches the layout.
func TestMIGApplyConvergesThroughNVML(t *testing.T) {
	for _, tc := range []struct {
		fn  string
		gpu int
	}{
		{"nvmlGpuInstanceCreateComputeInstance", 5},
		{"nvmlDeviceCreateGpuInstanceWithPlacement", 5},
		{"nvmlGpuInstanceDestroy", 5},
		{"nvmlComputeInstanceDestroy", 5},
		{"nvmlDeviceSetMigMode", 2},
	} {
		t.Run(tc.fn, func(t *testing.T) {
			useHost(t, fakehost.Host(t, "dgx-a100"), fakenvml.Fault{Function: tc.fn, GPU: tc.gpu, Return: nvml.ERROR_UNKNOWN})
			_, err := nvmlApply(t, "all-balanced")
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("GPU %d (", tc.gpu)) || !strings.HasSuffix(err.Error(), "Unknown Error: run apply again to finish") {
				t.Fatalf("error %v", err)
			}
			path := os.Getenv(fakenvml.EnvVar)
			data, _ := os.ReadFile(path)
			var kept []string
			for _, l := range strings.SplitAfter(string(data), "\n") {
				if !strings.HasPrefix(l, "fail ") {
					kept = append(kept, l)
				}
			}
			if err := os.WriteFile(path, []byte(strings.Join(kept, "")), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := nvmlApply(t, "all-balanced"); err != nil {
				t.Fatalf("apply again: %v", err)
			}
			want := simulatedApply(t, "dgx-a100", "all-balanced")
			if got := nvmlHost(t); !reflect.DeepEqual(withoutMIGUUIDs(got), withoutMIGUUIDs(want)) {
				t.Errorf("after the second apply:\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}
