package mig

import (
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
)

// TestSimulatedHostsMatchModels: every MIG device of the embedded
// simulated hosts has its profile's memory, SMs and engines, as the MIG
// devices `gpuctk mig apply` creates on a simulated host do and as NVML
// reports them on a real one, so that labels and MPS limits computed with
// --simulate are a real host's.
func TestSimulatedHostsMatchModels(t *testing.T) {
	for _, name := range inventory.Profiles() {
		p, err := inventory.LoadProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range p.GPUs {
			model, ok := ModelOf(&g)
			if !ok {
				continue
			}
			for _, d := range g.MIG {
				want, ok := model.Profile(d.Profile)
				if !ok {
					t.Errorf("%s GPU %d MIG device %d: profile %s is not one of the %s's", name, g.Index, d.Index, d.Profile, model.Name)
					continue
				}
				if d.MemoryMiB != want.MemoryMiB || d.SMCount != want.SMCount || d.Engines != want.Engines {
					t.Errorf("%s GPU %d MIG device %d (%s): %d MiB, %d SMs, engines %+v; want %d MiB, %d SMs, engines %+v",
						name, g.Index, d.Index, d.Profile, d.MemoryMiB, d.SMCount, d.Engines, want.MemoryMiB, want.SMCount, want.Engines)
				}
			}
		}
	}
}

// TestGH100SMs holds the H100's profiles to the SMs `nvidia-smi mig -lgip`
// reports on GH100 parts (H100 NVL, H200 and GH200 publish the same
// column, NVIDIA/gpu-operator#900 and NVIDIA/mig-parted#120 and #139): the
// 1-slice profile with two memory slices has 26 SMs, not the 16 of the
// one with one. The table had 16, so a 1g.20gb device's
// gpu.multiprocessors label and its MPS replica bound (one per SM) were
// short by 10.
func TestGH100SMs(t *testing.T) {
	var h100 *Model
	for _, m := range Models() {
		if m.Name == "H100-80GB" {
			h100 = &m
		}
	}
	if h100 == nil {
		t.Fatal("no H100-80GB model")
	}
	for name, sms := range map[string]int{"1g.10gb": 16, "1g.20gb": 26, "2g.20gb": 32, "3g.40gb": 60, "4g.40gb": 64, "7g.80gb": 132} {
		p, ok := h100.Profile(name)
		if !ok || p.SMCount != sms {
			t.Errorf("H100-80GB %s: %+v, want %d SMs", name, p, sms)
		}
	}
}
