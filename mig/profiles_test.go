package mig

import (
	"fmt"
	"strings"
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

// TestModels checks the model files as a whole: names, products and PCI
// device ids each belong to one model, every model the issue names is
// there, and a GPU is known by its PCI device id before its product name
// (an H100 PCIe is not an SXM part whatever NVML calls it).
func TestModels(t *testing.T) {
	seen := map[string]string{}
	for _, m := range Models() {
		keys := []string{"name " + m.Name}
		for _, p := range m.Products {
			keys = append(keys, "product "+p)
		}
		for _, id := range m.PCIDeviceIDs {
			if id&0xffff != 0x10DE {
				t.Errorf("%s: PCI device id %#x is not NVIDIA's (0xDDDD10DE)", m.Name, id)
			}
			keys = append(keys, fmt.Sprintf("PCI device id %#x", id))
		}
		for _, k := range keys {
			if other, dup := seen[k]; dup {
				t.Errorf("%s of %s is %s's too", k, m.Name, other)
			}
			seen[k] = m.Name
		}
	}
	for _, id := range []uint32{0x20B710DE, 0x20B010DE, 0x20B210DE, 0x20B510DE, 0x233010DE, 0x233110DE, 0x232110DE, 0x233510DE, 0x234210DE, 0x290110DE} {
		if _, ok := seen[fmt.Sprintf("PCI device id %#x", id)]; !ok {
			t.Errorf("no model for PCI device id %#x", id)
		}
	}
	pcie, _ := ModelOf(&inventory.GPU{Name: "NVIDIA H100 80GB HBM3", PCIDeviceID: 0x233110DE})
	if pcie == nil || pcie.Name != "H100-PCIe" || pcie.Profiles[len(pcie.Profiles)-1].SMCount != 114 {
		t.Errorf("PCI device id 0x2331: model %+v, want the H100 PCIe's, 114 SMs in 7g.80gb", pcie)
	}
	h200, _ := ModelOf(&inventory.GPU{Name: "NVIDIA H200"})
	if h200 == nil || h200.ProfileNames() != "1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb" {
		t.Errorf("H200 profiles: %v", h200)
	}
}

// TestParseModelRefuses: a model file that NVML could not have written is
// refused in one line naming the profile and the rule.
func TestParseModelRefuses(t *testing.T) {
	head := "name = \"X\"\nproducts = [\"NVIDIA X\"]\ncompute-slices = 7\nmemory-slices = 8\n"
	prof := func(extra string) string {
		return "[[profile]]\nname = \"1g.10gb\"\nnvml-profile = 0\ncompute-slices = 1\nmemory-slices = 1\nmemory-mib = 9856\nsm-count = 16\ninstances = 7\nstarts = [0, 1, 2, 3, 4, 5, 6]\n" + extra
	}
	for _, tc := range []struct{ name, data, want string }{
		{"unknown field", head + prof("colour = 1\n"), "colour"},
		{"start past the GPU", head + strings.Replace(prof(""), "starts = [0, 1, 2, 3, 4, 5, 6]", "starts = [0, 1, 2, 3, 4, 5, 8]", 1), `profile "1g.10gb": start 8 spans memory slices past the GPU's 8`},
		{"name twice", head + prof("") + prof(""), `profile "1g.10gb" is given twice`},
		{"more instances than starts", head + strings.Replace(prof(""), "instances = 7", "instances = 8", 1), `profile "1g.10gb": instances 8 and 7 starts`},
		{"more compute slices than the GPU", head + strings.Replace(prof(""), "compute-slices = 1", "compute-slices = 8", 1), `profile "1g.10gb": compute-slices 8: the GPU has 7`},
		{"memory slices not a power of 2", strings.Replace(head, "memory-slices = 8", "memory-slices = 6", 1) + prof(""), "memory slices a power of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseModel([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line with %q", err, tc.want)
			}
		})
	}
}
