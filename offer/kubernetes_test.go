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
		warn                []string // a part of each warning, in order
	}{
		{name: "none advertises GPUs in MIG mode whole, not their MIG devices", profile: "dgx-a100", want: []string{"nvidia.com/gpu: 0 1 2 3 4 5 6 7"},
			warn: []string{"GPU 4, 5, 6, 7 in MIG mode: advertised whole as nvidia.com/gpu"}},
		{name: "all-gpus shares GPUs in MIG mode whole under none, as NVIDIA's plugin", profile: "dgx-a100", toml: `
[[sharing]]
devices = ["all-gpus"]
strategy = "time-slicing"
replicas = 2
`, want: []string{"nvidia.com/gpu: 0::0 0::1 1::0 1::1 2::0 2::1 3::0 3::1 4::0 4::1 5::0 5::1 6::0 6::1 7::0 7::1"},
			warn: []string{"GPU 4, 5, 6, 7 in MIG mode"}},
		{name: "all-gpus under mixed: the MIG devices, not their GPUs", profile: "dgx-a100", toml: `
[kubernetes]
mig-strategy = "mixed"
[[sharing]]
devices = ["all-gpus"]
strategy = "time-slicing"
replicas = 2
`, want: []string{"nvidia.com/gpu: 0::0 0::1 1::0 1::1 2::0 2::1 3::0 3::1",
			"nvidia.com/mig-1g.5gb: mig-0 mig-1 mig-2 mig-3 mig-4 mig-5 mig-6 mig-14 mig-15",
			"nvidia.com/mig-2g.10gb: mig-7 mig-8 mig-9 mig-13",
			"nvidia.com/mig-3g.20gb: mig-10 mig-11 mig-12",
		}},
		{name: "all-gpus with MPS: a GPU in MIG mode cannot be", profile: "dgx-a100", toml: `
[[sharing]]
devices = ["all-gpus"]
strategy = "mps"
replicas = 2
`, err: "config: [[sharing]] entry 1: GPU 4 is in MIG mode: MPS cannot share it whole"},
		{name: "one resource pooling MIG profiles", profile: "dgx-a100", toml: `
[kubernetes]
mig-strategy = "mixed"
[[sharing]]
devices = ["mig"]
strategy = "time-slicing"
replicas = 2
resource = "nvidia.com/mig-shared"
`, want: []string{"nvidia.com/gpu: 0 1 2 3",
			"nvidia.com/mig-shared: mig-0::0 mig-0::1 mig-1::0 mig-1::1 mig-2::0 mig-2::1 mig-3::0 mig-3::1 mig-4::0 mig-4::1 mig-5::0 mig-5::1 mig-6::0 mig-6::1 mig-7::0 mig-7::1 mig-8::0 mig-8::1 mig-9::0 mig-9::1 mig-10::0 mig-10::1 mig-11::0 mig-11::1 mig-12::0 mig-12::1 mig-13::0 mig-13::1 mig-14::0 mig-14::1 mig-15::0 mig-15::1",
		}, warn: []string{"resource nvidia.com/mig-shared (config: [[sharing]] entry 1) pools devices of 3 kinds: NVIDIA A100-SXM4-40GB MIG 1g.5gb (9), NVIDIA A100-SXM4-40GB MIG 2g.10gb (4), NVIDIA A100-SXM4-40GB MIG 3g.20gb (3): a pod cannot choose"}},
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
`, want: []string{"nvidia.com/gpu: 0::0 0::1 1::0 1::1 2 3 4 5 6 7"},
			warn: []string{"resource nvidia.com/gpu mixes the whole GPU 2 and replicas of GPU 0 (config: [[sharing]] entry 1): a pod asking for it may get either", "GPU 4, 5, 6, 7 in MIG mode"}},
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
`, want: []string{"nvidia.com/gpu: 2 3 4 5 6 7", "nvidia.com/gpu-small: 0::0 0::1 1::0 1::1 1::2"}, warn: []string{"GPU 4, 5, 6, 7 in MIG mode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tc.toml))
			if err != nil {
				t.Fatal(err)
			}
			set, err := Resolve(fakehost.Host(t, tc.profile), c)
			if err == nil {
				err = set.Refused
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Warnings, then the notes of what Kubernetes is offered.
			said := append(append([]string(nil), set.Warnings...), set.Notes...)
			if len(said) != len(tc.warn) {
				t.Errorf("warnings and notes:\n%s\nwant %d", strings.Join(said, "\n"), len(tc.warn))
			}
			for i, w := range tc.warn {
				if i < len(said) && !strings.Contains(said[i], w) {
					t.Errorf("warning %d: %s\nwant one containing %q", i, said[i], w)
				}
			}
			var got []string
			for _, r := range set.Resources {
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
			if err == nil {
				err = set.Refused
			}
			if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error:\n%v\nwant one line containing %q", err, tc.err)
			}
		})
	}
}
