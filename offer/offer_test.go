package offer

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
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
			c, err := config.Parse([]byte(tc.toml))
			if err != nil {
				t.Fatal(err)
			}
			c.Path = "/etc/gpuctk/config.toml"
			set, err := Resolve(h, c)
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
			for _, s := range set.Shared {
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
	c, err := config.Parse([]byte("[[sharing]]\ndevices=[\"mig-0\"]\nstrategy=\"mps\"\nreplicas=3\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Resolve(h, c)
	if err != nil {
		t.Fatal(err)
	}
	if p, m := set.Shared[0].ThreadPercentage, set.Shared[0].PinnedMemoryMiB; p != 33 || m != 9856/3 {
		t.Errorf("defaults = %d%%, %d MiB", p, m)
	}
}

func TestNamesOf(t *testing.T) {
	devs := fakehost.Host(t, "dgx-a100").Devices()
	gpu, mig := devs[0], devs[4] // GPU 0; mig-0, GPU 4's MIG device 0
	gpuUUID, migUUID := gpu.GPU.UUID, mig.MIG.UUID
	for _, tc := range []struct {
		name     string
		styles   []string
		gpu, mig []string
	}{
		{"index", []string{"index"}, []string{"0"}, []string{"mig-0"}},
		{"uuid", []string{"uuid"}, []string{gpuUUID}, []string{migUUID}},
		{"gpu:mig", []string{"gpu:mig"}, nil, []string{"4:0"}},
		{"all three in the usual order", []string{"uuid", "gpu:mig", "index"}, []string{"0", gpuUUID}, []string{"mig-0", "4:0", migUUID}},
		{"duplicates count once", []string{"uuid", "index", "uuid"}, []string{"0", gpuUUID}, []string{"mig-0", migUUID}},
		{"unknown style", []string{"serial"}, nil, nil},
		{"type-index, nvidia-ctk's", []string{"type-index"}, []string{"gpu0"}, []string{"mig4:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := namesOf(gpu, tc.styles); !reflect.DeepEqual(got, tc.gpu) {
				t.Errorf("GPU 0: %v, want %v", got, tc.gpu)
			}
			if got := namesOf(mig, tc.styles); !reflect.DeepEqual(got, tc.mig) {
				t.Errorf("mig-0: %v, want %v", got, tc.mig)
			}
		})
	}
}

// TestShares checks what a share carries: the physical device, the
// configured or default MPS limits, the daemon's folder and the entry.
func TestShares(t *testing.T) {
	cfg := &config.Config{Path: "/etc/gpuctk/config.toml", Sharing: []config.Sharing{
		{Devices: []string{"7:2", "2"}, Strategy: config.MPS, Replicas: 4},
		{Devices: []string{"1"}, Strategy: config.TimeSlicing, Replicas: 4},
		{Devices: []string{"6:0"}, Strategy: config.MPS, Replicas: 2, ActiveThreadPercentage: 30, PinnedMemoryLimit: 8 << 30},
	}}
	set, err := Resolve(fakehost.Host(t, "dgx-a100"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name, uuid, dir, origin string
		replicas, threads       int
		memory                  uint64
		failOverOne             bool
	}
	var got []row
	for _, s := range set.Shared {
		got = append(got, row{s.Name(), s.UUID(), s.Dir, s.Origin.String(), s.Replicas, s.ThreadPercentage, s.PinnedMemoryMiB, s.FailRequestsGreaterThanOne})
	}
	const e1, e2, e3 = "config /etc/gpuctk/config.toml: [[sharing]] entry 1", "config /etc/gpuctk/config.toml: [[sharing]] entry 2", "config /etc/gpuctk/config.toml: [[sharing]] entry 3"
	want := []row{
		{"1", "GPU-4ef5b4c3-8f0e-3bd4-8a8b-6b2a47a1e3c5", "", e2, 4, 0, 0, false},
		{"2", "GPU-18909d70-187a-d774-bf80-dcda749edaf4", "/run/gpuctk/mps/GPU-18909d70-187a-d774-bf80-dcda749edaf4", e1, 4, 25, 10240, true},
		{"mig-10", "MIG-05dc9572-2b06-1f79-31a3-695087f6dd02", "/run/gpuctk/mps/MIG-05dc9572-2b06-1f79-31a3-695087f6dd02", e3, 2, 30, 8192, true},
		{"mig-14", "MIG-274ba80d-9427-994a-b610-1e6c62975ed4", "/run/gpuctk/mps/MIG-274ba80d-9427-994a-b610-1e6c62975ed4", e1, 4, 25, 1216, true},
	}
	want[0].uuid = got[0].uuid // GPU 1's UUID is the profile's business
	if !reflect.DeepEqual(got, want) {
		t.Errorf("shares:\n got %+v\nwant %+v", got, want)
	}
	if s := set.Shared[3].String(); s != "MIG device 7:2 (MIG-274ba80d-9427-994a-b610-1e6c62975ed4)" {
		t.Errorf("String = %q", s)
	}
	if n := len(set.MPS()); n != 3 {
		t.Errorf("MPS() has %d devices, want 3", n)
	}
}

// TestDeviceNames checks the names whole devices get from [cdi]
// device-names, and that a style leaving a device nameless is refused.
func TestDeviceNames(t *testing.T) {
	h := fakehost.Host(t, "dgx-a100")
	cfg := &config.Config{CDI: config.CDI{DeviceNames: []string{"type-index"}}}
	set, err := Resolve(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Devices[0].Names; !reflect.DeepEqual(got, []string{"gpu0"}) {
		t.Errorf("GPU 0: %v", got)
	}
	// GPU 4, in MIG mode, comes whole before its MIG devices.
	if got := set.Devices[4].Names; !reflect.DeepEqual(got, []string{"gpu4"}) {
		t.Errorf("GPU 4: %v", got)
	}
	if got := set.Devices[5].Names; !reflect.DeepEqual(got, []string{"mig4:0"}) {
		t.Errorf("mig-0: %v", got)
	}
	// On a host whose GPUs are all in MIG mode, "gpu:mig" alone names
	// every device there is: the MIG devices. The GPUs, which it does not
	// name, are not offered whole.
	cfg.CDI.DeviceNames = []string{"gpu:mig"}
	set, err = Resolve(fakehost.Host(t, "h100"), cfg)
	if err != nil {
		t.Fatalf("gpu:mig alone on a host in MIG mode: %v", err)
	}
	if len(set.Devices) != 7 || !reflect.DeepEqual(set.Devices[0].Names, []string{"0:0"}) {
		t.Errorf("gpu:mig alone on h100: %d devices, the first %v; want 7, 0:0 first", len(set.Devices), set.Devices[0].Names)
	}
	if _, err := Resolve(h, cfg); err == nil || !strings.Contains(err.Error(), `[cdi] "device-names" ["gpu:mig"] gives GPU 0 no name`) {
		t.Errorf("gpu:mig alone: %v", err)
	}
}

// TestMIGModeWithoutMIGDevices checks that a GPU in MIG mode with no MIG
// device yet (MIG enabled, no instance created) is still offered whole,
// as every GPU in MIG mode is, and as NVIDIA's toolkit offers it: before,
// it had no entry at all, not even in "all".
func TestMIGModeWithoutMIGDevices(t *testing.T) {
	h := &inventory.Host{DriverVersion: "580.65.06", GPUs: []inventory.GPU{
		{Index: 0, Minor: 0, UUID: "GPU-m", MemoryMiB: 81559, ComputeCapability: "9.0", MIGEnabled: true},
		{Index: 1, Minor: 1, UUID: "GPU-w", MemoryMiB: 81559, ComputeCapability: "9.0"},
		{Index: 2, Minor: 2, UUID: "GPU-g", MemoryMiB: 81559, ComputeCapability: "9.0", MIGEnabled: true,
			MIG: []inventory.MIGDevice{{Index: 0, GI: 7, CI: 0, UUID: "MIG-a", Profile: "1g.10gb", MemoryMiB: 9856, SMCount: 16}}},
	}}
	set, err := Resolve(h, config.Default())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range set.Devices {
		got = append(got, strings.Join(d.Names, ","))
	}
	want := []string{"0,GPU-m", "1,GPU-w", "2,GPU-g", "mig-0,2:0,MIG-a"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("devices = %q, want %q", got, want)
	}
}
