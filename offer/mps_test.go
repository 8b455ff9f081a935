package offer

import (
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
)

// mpsHost has an A100 (GPU 0, index name "0"), a P100 (GPU 1), a GPU whose
// memory is unknown (GPU 2) and an A100 in MIG mode with one 14-SM
// instance (GPU 4, mig-0).
func mpsHost() *inventory.Host {
	return &inventory.Host{DriverVersion: "580.65.06", GPUs: []inventory.GPU{
		{Index: 0, Minor: 0, UUID: "GPU-a", MemoryMiB: 40960, ComputeCapability: "8.0"},
		{Index: 1, Minor: 1, UUID: "GPU-p", MemoryMiB: 16384, ComputeCapability: "6.0"},
		{Index: 2, Minor: 2, UUID: "GPU-x", ComputeCapability: "8.0"},
		{Index: 4, Minor: 4, UUID: "GPU-g", MemoryMiB: 40960, ComputeCapability: "8.0", MIGEnabled: true,
			MIG: []inventory.MIGDevice{{Index: 0, GI: 7, CI: 0, UUID: "MIG-m", Profile: "1g.5gb", MemoryMiB: 4864, SMCount: 14}}},
	}}
}

func mpsEntry(dev string, replicas, percent int, limit config.Size) config.Sharing {
	return config.Sharing{Devices: []string{dev}, Strategy: config.MPS, Replicas: replicas, ActiveThreadPercentage: percent, PinnedMemoryLimit: limit}
}

func TestMPSDefaults(t *testing.T) {
	for _, tc := range []struct {
		e        config.Sharing
		percent  int
		limitMiB uint64
	}{
		{mpsEntry("0", 4, 0, 0), 25, 10240},
		{mpsEntry("0", 3, 0, 0), 33, 13653},
		{mpsEntry("0", 48, 0, 0), 2, 853},
		{mpsEntry("0", 4, 40, 20<<30), 40, 20480},
		{mpsEntry("mig-0", 7, 0, 0), 14, 694},
		{mpsEntry("mig-0", 2, 0, 1536<<20), 50, 1536},
	} {
		set, err := Resolve(mpsHost(), &config.Config{Sharing: []config.Sharing{tc.e}})
		if err != nil {
			t.Fatal(err)
		}
		s := set.Shared[0]
		if s.ThreadPercentage != tc.percent || s.PinnedMemoryMiB != tc.limitMiB {
			t.Errorf("%s with %+v: %d%%, %dMiB; want %d%%, %dMiB", s, tc.e, s.ThreadPercentage, s.PinnedMemoryMiB, tc.percent, tc.limitMiB)
		}
	}
}

func TestMaxReplicas(t *testing.T) {
	h := mpsHost()
	for _, tc := range []struct {
		d    inventory.Device
		want int
	}{
		{h.Devices()[0], 48},
		{h.Devices()[1], 16},
		{h.Devices()[3], 14},
		{inventory.Device{GPU: &inventory.GPU{ComputeCapability: "9.0"}, MIG: &inventory.MIGDevice{SMCount: 66}}, 48},
		{inventory.Device{GPU: &inventory.GPU{}, Ordinal: -1}, 48}, // compute capability unknown
	} {
		if got := (&Share{Device: tc.d}).MaxReplicas(); got != tc.want {
			t.Errorf("%+v: MaxReplicas = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestMPSRules(t *testing.T) {
	const at = "config: [[sharing]] entry 1: "
	long := "/run/" + strings.Repeat("x", 60)
	for _, tc := range []struct {
		name      string
		e         config.Sharing
		stateRoot string
		want      string // "" when valid
	}{
		{"valid", mpsEntry("0", 4, 25, 20<<30), "", ""},
		{"defaults", mpsEntry("0", 48, 0, 0), "", ""},
		{"pre-Volta at its limit", mpsEntry("1", 16, 0, 0), "", ""},
		{"MIG at its limit", mpsEntry("mig-0", 14, 0, 0), "", ""},
		{"too many replicas", mpsEntry("0", 49, 0, 0), "",
			at + "MPS device GPU 0 (GPU-a): replicas is 49: at most 48 (the most clients an MPS server takes)"},
		{"too many replicas before Volta", mpsEntry("1", 17, 0, 0), "",
			at + "MPS device GPU 1 (GPU-p): replicas is 17: at most 16 (the most clients an MPS server takes on a GPU older than Volta)"},
		{"too many replicas on a small MIG instance", mpsEntry("mig-0", 15, 0, 0), "",
			at + "MPS device MIG device 4:0 (MIG-m): replicas is 15: at most 14 (one client per SM of this MIG instance, which has 14)"},
		{"memory limit above device memory", mpsEntry("0", 2, 0, 41<<30), "",
			at + "MPS device GPU 0 (GPU-a): pinned-memory-limit is 41984MiB: the device has only 40960MiB"},
		{"memory limit above MIG memory", mpsEntry("mig-0", 2, 0, 5<<30), "",
			at + "MPS device MIG device 4:0 (MIG-m): pinned-memory-limit is 5120MiB: the device has only 4864MiB"},
		{"memory limit below 1MiB", mpsEntry("0", 2, 0, 4096), "",
			at + "MPS device GPU 0 (GPU-a): pinned-memory-limit is 4096 bytes: it must be at least 1MiB"},
		{"memory unknown", mpsEntry("2", 2, 0, 0), "",
			at + "MPS device GPU 2 (GPU-x): its memory size is unknown: set pinned-memory-limit"},
		{"control socket path too long", mpsEntry("0", 2, 0, 0), long,
			at + "MPS device GPU 0 (GPU-a): its control socket " + long + "/GPU-a/pipe/control is 84 bytes long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{Sharing: []config.Sharing{tc.e}, MPS: config.MPSConfig{StateRoot: tc.stateRoot}}
			if tc.name == "control socket path too long" {
				cfg.MPS.StateRoot = long + strings.Repeat("y", 40)
				tc.want = at + "MPS device GPU 0 (GPU-a): its control socket " + cfg.MPS.StateRoot + "/GPU-a/pipe/control_privileged is 135 bytes long, over the 107 a unix socket allows: choose a shorter [mps] state-root"
			}
			_, err := Resolve(mpsHost(), cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v\nwant  %s", err, tc.want)
			}
		})
	}
}

// TestMPSRulesReportEveryFailure checks that every offending device and
// rule gets its own line, each naming the file and entry.
func TestMPSRulesReportEveryFailure(t *testing.T) {
	cfg := &config.Config{Path: "/etc/gpuctk/config.toml", Sharing: []config.Sharing{
		mpsEntry("0", 49, 0, 41<<30),
		{Devices: []string{"2"}, Strategy: config.TimeSlicing, Replicas: 100}, // not MPS: no MPS rule applies
		mpsEntry("1", 17, 0, 0),
	}}
	_, err := Resolve(mpsHost(), cfg)
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		"config /etc/gpuctk/config.toml: [[sharing]] entry 1: MPS device GPU 0 (GPU-a): replicas",
		"config /etc/gpuctk/config.toml: [[sharing]] entry 1: MPS device GPU 0 (GPU-a): pinned-memory-limit",
		"config /etc/gpuctk/config.toml: [[sharing]] entry 3: MPS device GPU 1 (GPU-p): replicas",
	}
	if len(lines) != len(want) {
		t.Fatalf("want %d lines, got:\n%s", len(want), err)
	}
	for i, prefix := range want {
		if !strings.HasPrefix(lines[i], prefix) {
			t.Errorf("line %d = %q, want prefix %q", i+1, lines[i], prefix)
		}
	}
}
