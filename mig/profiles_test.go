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
