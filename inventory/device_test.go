package inventory

import (
	"reflect"
	"strings"
	"testing"
)

func TestDevicesAndSelect(t *testing.T) {
	p, err := LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := p.Host()
	devs := h.Devices()
	// GPUs 0-3 whole, then 7+3+2+4 MIG devices.
	if len(devs) != 4+16 {
		t.Fatalf("%d devices", len(devs))
	}
	if got := devs[4].Names(); got[0] != "mig-0" || got[1] != "4:0" || !strings.HasPrefix(got[2], "MIG-") {
		t.Errorf("first MIG device names = %v", got)
	}
	if got := devs[19].Names(); got[0] != "mig-15" || got[1] != "7:3" {
		t.Errorf("last MIG device names = %v", got)
	}

	names := func(ds []Device) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name())
		}
		return out
	}
	for _, tc := range []struct {
		sel  string
		want []string
		err  string
	}{
		{sel: "0", want: []string{"0"}},
		{sel: h.GPUs[2].UUID, want: []string{"2"}},
		{sel: "mig-3", want: []string{"mig-3"}},
		{sel: "5:1", want: []string{"mig-8"}},
		{sel: h.GPUs[6].MIG[1].UUID, want: []string{"mig-11"}},
		{sel: "3g.20gb", want: []string{"mig-10", "mig-11", "mig-12"}},
		{sel: "all", want: names(devs)},
		{sel: "4", err: "GPU 4, which is in MIG mode"},
		{sel: "9", err: `selector "9" matches no device`},
		{sel: "7g.40gb", want: nil}, // a profile this node lacks
		{sel: "7g40gb", err: "matches no device"},
		{sel: "all-gpus", want: []string{"0", "1", "2", "3", "4", "5", "6", "7"}},
	} {
		got, err := h.Select(tc.sel)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Select(%q) err = %v, want %q", tc.sel, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(names(got), tc.want) {
			t.Errorf("Select(%q) = %v, %v; want %v", tc.sel, names(got), err, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	p, err := LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := p.Host()
	devs := h.Devices()
	gpu, mig := devs[0], devs[4] // GPU 0; mig-0, GPU 4's MIG device 0
	if got := gpu.Names(); !reflect.DeepEqual(got, []string{"0", gpu.GPU.UUID}) {
		t.Errorf("GPU 0 Names = %v", got)
	}
	if got := mig.Names(); !reflect.DeepEqual(got, []string{"mig-0", "4:0", mig.MIG.UUID}) {
		t.Errorf("mig-0 Names = %v", got)
	}
	if gpu.GPUMIGName() != "" || mig.GPUMIGName() != "4:0" {
		t.Errorf("GPUMIGName = %q, %q", gpu.GPUMIGName(), mig.GPUMIGName())
	}
}

func TestXIDEvent(t *testing.T) {
	p, err := LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := p.Host()
	gpu0, mig0 := h.Devices()[0], h.Devices()[4] // GPU 0; GPU 4's first MIG device
	for _, tc := range []struct {
		name     string
		ev       XIDEvent
		critical bool
		concerns []Device
		not      []Device
	}{
		{"whole GPU, critical", XIDEvent{GPU: gpu0.GPU.UUID, GI: -1, CI: -1, XID: 79}, true, []Device{gpu0}, []Device{mig0}},
		{"application fault", XIDEvent{GPU: gpu0.GPU.UUID, GI: -1, CI: -1, XID: 13}, false, []Device{gpu0}, nil},
		{"MIG device", XIDEvent{GPU: mig0.GPU.UUID, GI: mig0.MIG.GI, CI: mig0.MIG.CI, XID: 48}, true, []Device{mig0, {GPU: mig0.GPU, Ordinal: -1}}, []Device{gpu0, h.Devices()[5]}},
		{"whole MIG GPU", XIDEvent{GPU: mig0.GPU.UUID, GI: -1, CI: -1, XID: 48}, true, []Device{mig0, h.Devices()[5]}, []Device{gpu0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ev.Critical() != tc.critical {
				t.Errorf("XID %d critical = %v, want %v", tc.ev.XID, !tc.critical, tc.critical)
			}
			for _, d := range tc.concerns {
				if !tc.ev.Concerns(d) {
					t.Errorf("event does not concern %s", d)
				}
			}
			for _, d := range tc.not {
				if tc.ev.Concerns(d) {
					t.Errorf("event concerns %s", d)
				}
			}
		})
	}
}
