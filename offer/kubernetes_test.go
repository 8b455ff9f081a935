package offer

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

func TestResources(t *testing.T) {
	for _, tc := range []struct {
		name, profile, toml string
		want                []string // "resource: id id ..."
		err                 string
	}{
		{name: "none advertises GPUs in MIG mode whole, not their MIG devices", profile: "dgx-a100", want: []string{"nvidia.com/gpu: 0 1 2 3 4 5 6 7"}},
		{name: "mixed", profile: "dgx-a100", toml: "[kubernetes]\nmig-strategy = \"mixed\"\n", want: []string{
			"nvidia.com/gpu: 0 1 2 3",
			"nvidia.com/mig-1g.5gb: mig-0 mig-1 mig-2 mig-3 mig-4 mig-5 mig-6 mig-14 mig-15",
			"nvidia.com/mig-2g.10gb: mig-7 mig-8 mig-9 mig-13",
			"nvidia.com/mig-3g.20gb: mig-10 mig-11 mig-12",
		}},
		{name: "single with whole GPUs", profile: "dgx-a100", toml: "[kubernetes]\nmig-strategy = \"single\"\n",
			err: `mig-strategy "single": GPU 4, GPU 5, GPU 6, GPU 7 in MIG mode but GPU 0, GPU 1, GPU 2, GPU 3 not`},
		{name: "single without MIG", profile: "l40s", toml: "[kubernetes]\nmig-strategy = \"single\"\n", want: []string{"nvidia.com/gpu: 0 1 2 3"}},
		{name: "replicas under the device's resource", profile: "dgx-a100", toml: `
[[sharing]]
devices = ["0", "1"]
strategy = "time-slicing"
replicas = 2
`, err: "resource nvidia.com/gpu would mix the whole GPU 2 and replicas of GPU 0 (config: [[sharing]] entry 1)"},
		{name: "rename-shared", profile: "dgx-a100", toml: `
[kubernetes]
rename-shared = true
mig-strategy = "mixed"
[[sharing]]
devices = ["0"]
strategy = "time-slicing"
replicas = 2
[[sharing]]
devices = ["mig-7"]
strategy = "mps"
replicas = 2
[[sharing]]
devices = ["1"]
strategy = "mps"
replicas = 3
resource = "nvidia.com/gpu-small"
`, want: []string{
			"nvidia.com/gpu: 2 3",
			"nvidia.com/gpu-small: 1::0 1::1 1::2 (fail>1)",
			"nvidia.com/gpu.shared: 0::0 0::1",
			"nvidia.com/mig-1g.5gb: mig-0 mig-1 mig-2 mig-3 mig-4 mig-5 mig-6 mig-14 mig-15",
			"nvidia.com/mig-2g.10gb: mig-8 mig-9 mig-13",
			"nvidia.com/mig-2g.10gb.shared: mig-7::0 mig-7::1 (fail>1)",
			"nvidia.com/mig-3g.20gb: mig-10 mig-11 mig-12",
		}},
		{name: "two entries, one resource, two strategies", profile: "dgx-a100", toml: `
[[sharing]]
devices = ["0"]
strategy = "time-slicing"
replicas = 2
resource = "nvidia.com/gpu-small"
[[sharing]]
devices = ["1"]
strategy = "mps"
replicas = 2
resource = "nvidia.com/gpu-small"
`, err: `resource nvidia.com/gpu-small: config: [[sharing]] entry 2 uses strategy "mps" but config: [[sharing]] entry 1 uses "time-slicing"`},
		{name: "two entries, one resource, two fail settings", profile: "dgx-a100", toml: `
[[sharing]]
devices = ["0"]
strategy = "time-slicing"
replicas = 2
resource = "nvidia.com/gpu-small"
[[sharing]]
devices = ["1"]
strategy = "time-slicing"
replicas = 4
resource = "nvidia.com/gpu-small"
fail-requests-greater-than-one = true
`, err: "entry 2 sets fail-requests-greater-than-one = true but config: [[sharing]] entry 1 sets false"},
		{name: "two agreeing entries, one resource", profile: "dgx-a100", toml: `
[[sharing]]
devices = ["0"]
strategy = "time-slicing"
replicas = 2
resource = "nvidia.com/gpu-small"
[[sharing]]
devices = ["1"]
strategy = "time-slicing"
replicas = 3
resource = "nvidia.com/gpu-small"
`, want: []string{"nvidia.com/gpu: 2 3 4 5 6 7", "nvidia.com/gpu-small: 0::0 0::1 1::0 1::1 1::2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tc.toml))
			if err != nil {
				t.Fatal(err)
			}
			set, err := Resolve(fakehost.Host(t, tc.profile), c)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := Resources(set, c.Kubernetes)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs {
				var ids []string
				for _, d := range r.Devices {
					ids = append(ids, d.Name())
				}
				s := fmt.Sprintf("%s: %s", r.Name, strings.Join(ids, " "))
				if r.FailRequestsGreaterThanOne {
					s += " (fail>1)"
				}
				got = append(got, s)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestResourcesErrorOncePerDevice: a shared device that may not join its
// resource is named once, not once per replica.
func TestResourcesErrorOncePerDevice(t *testing.T) {
	for _, tc := range []struct{ name, toml, err string }{
		{"mixed after a whole GPU", "[[sharing]]\ndevices = [\"1\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n",
			"resource nvidia.com/gpu would mix the whole GPU 0 and replicas of GPU 1 (config: [[sharing]] entry 1)"},
		{"second strategy", "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\nresource = \"nvidia.com/gpu-small\"\n" +
			"[[sharing]]\ndevices = [\"1\"]\nstrategy = \"mps\"\nreplicas = 4\nresource = \"nvidia.com/gpu-small\"\n",
			`resource nvidia.com/gpu-small: config: [[sharing]] entry 2 uses strategy "mps" but config: [[sharing]] entry 1 uses "time-slicing"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tc.toml))
			if err != nil {
				t.Fatal(err)
			}
			set, err := Resolve(fakehost.Host(t, "l40s"), c)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Resources(set, c.Kubernetes)
			if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error:\n%v\nwant one line containing %q", err, tc.err)
			}
		})
	}
}
