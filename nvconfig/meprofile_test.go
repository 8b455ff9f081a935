package nvconfig

import (
	"os"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// A MIG profile with an attribute (1g.5gb+me) is advertised by NVIDIA's
// plugin, and by gpuctk's, as nvidia.com/mig-1g.5gb.me: a config sharing
// that resource must convert to a selector that matches those devices.
func TestConvertMIGProfileWithAttribute(t *testing.T) {
	data, err := os.ReadFile("../inventory/profiles/dgx-a100.toml")
	if err != nil {
		t.Fatal(err)
	}
	// GPU 4's first MIG device becomes a 1g.5gb+me.
	data = []byte(strings.Replace(string(data), `profile = "1g.5gb"`, `profile = "1g.5gb+me"`, 1))
	p, err := inventory.ParseProfile(data)
	if err != nil {
		t.Fatal(err)
	}
	host, err := p.Host()
	if err != nil {
		t.Fatal(err)
	}
	in := "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.5gb.me\n      replicas: 2\n"
	outs, err := Convert([]byte(in), "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(outs[0].TOML)
	if err != nil {
		t.Fatal(err)
	}
	set, err := offer.Resolve(host, cfg)
	if err != nil {
		t.Fatalf("converted config on a host with a 1g.5gb+me device: %v\n%s", err, outs[0].TOML)
	}
	res := set.Resources
	for _, r := range res {
		if r.Name == "nvidia.com/mig-1g.5gb.me" {
			if !r.Shared || len(r.Devices) != 2 {
				t.Errorf("%s: shared %v with %d devices, want its one device's 2 replicas", r.Name, r.Shared, len(r.Devices))
			}
			return
		}
	}
	t.Errorf("no resource nvidia.com/mig-1g.5gb.me among %v", res)
}
