package config

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/internal/fakehost"
)

func TestResolve(t *testing.T) {
	h := fakehost.Host(t, "dgx-a100")
	for _, tc := range []struct {
		name, toml string
		want       []string // names of shared devices, with their replica counts
		err        string
	}{
		{name: "index and profile", toml: `
[[sharing]]
devices = ["0", "2g.10gb"]
strategy = "time-slicing"
replicas = 4
[[sharing]]
devices = ["1"]
strategy = "mps"
replicas = 2
`, want: []string{"0x4", "1x2", "mig-7x4", "mig-8x4", "mig-9x4", "mig-13x4"}},
		{name: "overlap", toml: `
[[sharing]]
devices = ["mig-0"]
strategy = "time-slicing"
replicas = 2
[[sharing]]
devices = ["1g.5gb"]
strategy = "mps"
replicas = 2
`, err: "[[sharing]] entry 2: MIG device mig-0 (GPU 4, 1g.5gb) is already shared by entry 1"},
		{name: "matches nothing", toml: `
[[sharing]]
devices = ["12"]
strategy = "time-slicing"
replicas = 2
`, err: `[[sharing]] entry 1: selector "12" matches no device`},
		{name: "same entry twice is fine", toml: `
[[sharing]]
devices = ["0", "0"]
strategy = "time-slicing"
replicas = 3
`, want: []string{"0x3"}},
		{name: "gpu:mig names MIG replicas", toml: `
[cdi]
replica-names = ["gpu:mig"]
[[sharing]]
devices = ["mig-0"]
strategy = "time-slicing"
replicas = 2
`, want: []string{"mig-0x2"}},
		{name: "gpu:mig leaves GPU replicas nameless", toml: `
[cdi]
replica-names = ["gpu:mig"]
[[sharing]]
devices = ["mig-0", "1"]
strategy = "time-slicing"
replicas = 2
`, err: `[cdi] "replica-names" ["gpu:mig"] gives the replicas of GPU 1 (shared by [[sharing]] entry 1) no name: add "index" or "uuid"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.toml))
			if err != nil {
				t.Fatal(err)
			}
			c.Path = "/etc/gpuctk/config.toml"
			got, err := c.Resolve(h)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "config /etc/gpuctk/config.toml: ") {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range got {
				names = append(names, s.Name()+"x"+strconv.Itoa(s.Replicas))
			}
			if strings.Join(names, " ") != strings.Join(tc.want, " ") {
				t.Errorf("shared = %v, want %v", names, tc.want)
			}
		})
	}
}

func TestSharedDefaults(t *testing.T) {
	h := fakehost.Host(t, "h100")
	c, err := Parse([]byte("[[sharing]]\ndevices=[\"mig-0\"]\nstrategy=\"mps\"\nreplicas=3\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	if p, m := s[0].ThreadPercentage(), s[0].MemoryLimitMiB(); p != 33 || m != 9856/3 {
		t.Errorf("defaults = %d%%, %d MiB", p, m)
	}
}
