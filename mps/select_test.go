package mps

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
)

func loadHost(t *testing.T, name string) *inventory.Host {
	t.Helper()
	p, err := inventory.LoadProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Host()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mpsEntry(replicas int, devices ...string) config.Sharing {
	return config.Sharing{Devices: devices, Strategy: config.MPS, Replicas: replicas}
}

// names renders resolved devices as "name(G:M)@entry".
func names(devs []Device) string {
	var s []string
	for _, d := range devs {
		n := d.Name
		if d.MIGIndex >= 0 {
			n += fmt.Sprintf("(%d:%d)", d.GPUIndex, d.MIGIndex)
		}
		s = append(s, fmt.Sprintf("%s@%d", n, d.Entry))
	}
	return strings.Join(s, " ")
}

func TestResolve(t *testing.T) {
	host := loadHost(t, "dgx-a100")
	for _, tc := range []struct {
		name    string
		sharing []config.Sharing
		want    string
	}{
		{"index", []config.Sharing{mpsEntry(2, "1")}, "1@1"},
		{"gpu uuid", []config.Sharing{mpsEntry(2, "GPU-a7542f20-14de-9809-577c-4528b760814b")}, "1@1"},
		{"gpu uuid any case", []config.Sharing{mpsEntry(2, "GPU-A7542F20-14DE-9809-577C-4528B760814B")}, "1@1"},
		{"mig uuid", []config.Sharing{mpsEntry(2, "MIG-ffd1373f-d1f8-33e3-58cc-51d4555389d9")}, "mig-13(7:1)@1"},
		{"mig-N", []config.Sharing{mpsEntry(2, "mig-7")}, "mig-7(5:0)@1"},
		{"G:M", []config.Sharing{mpsEntry(2, "6:1")}, "mig-11(6:1)@1"},
		{"profile", []config.Sharing{mpsEntry(2, "3g.20gb")}, "mig-10(6:0)@1 mig-11(6:1)@1 mig-12(7:0)@1"},
		{"named twice in one entry", []config.Sharing{mpsEntry(2, "0", "GPU-13fe3248-4da8-65f8-e972-3f15eef51793")}, "0@1"},
		{"host order across entries", []config.Sharing{mpsEntry(2, "2g.10gb"), {Devices: []string{"3", "0"}, Strategy: config.TimeSlicing, Replicas: 4}},
			"0@2 3@2 mig-7(5:0)@1 mig-8(5:1)@1 mig-9(5:2)@1 mig-13(7:1)@1"},
		{"all", []config.Sharing{mpsEntry(2, "all")},
			"0@1 1@1 2@1 3@1 mig-0(4:0)@1 mig-1(4:1)@1 mig-2(4:2)@1 mig-3(4:3)@1 mig-4(4:4)@1 mig-5(4:5)@1 mig-6(4:6)@1 " +
				"mig-7(5:0)@1 mig-8(5:1)@1 mig-9(5:2)@1 mig-10(6:0)@1 mig-11(6:1)@1 mig-12(7:0)@1 mig-13(7:1)@1 mig-14(7:2)@1 mig-15(7:3)@1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := Resolve(host, tc.sharing)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(devs); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestResolveDevice(t *testing.T) {
	host := loadHost(t, "dgx-a100")
	devs, err := Resolve(host, []config.Sharing{mpsEntry(4, "7:2", "2")})
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Name: "2", GPUIndex: 2, MIGIndex: -1, UUID: "GPU-18909d70-187a-d774-bf80-dcda749edaf4", ParentUUID: "GPU-18909d70-187a-d774-bf80-dcda749edaf4",
			MemoryMiB: 40960, ComputeMajor: 8, Entry: 1},
		{Name: "mig-14", GPUIndex: 7, MIGIndex: 2, UUID: "MIG-274ba80d-9427-994a-b610-1e6c62975ed4", ParentUUID: "GPU-6031c12e-e245-fc45-1cf6-d8e948ef41fa",
			MemoryMiB: 4864, ComputeMajor: 8, SMCount: 14, Entry: 1},
	}
	if len(devs) != len(want) {
		t.Fatalf("got %d devices: %+v", len(devs), devs)
	}
	for i := range want {
		want[i].Sharing = devs[i].Sharing
		if devs[i].String() != want[i].String() || devs[i].Name != want[i].Name || devs[i].ParentUUID != want[i].ParentUUID ||
			devs[i].MemoryMiB != want[i].MemoryMiB || devs[i].ComputeMajor != want[i].ComputeMajor || devs[i].SMCount != want[i].SMCount ||
			devs[i].Entry != want[i].Entry || devs[i].Sharing.Replicas != 4 {
			t.Errorf("device %d = %+v\nwant %+v", i, devs[i], want[i])
		}
	}
}

func TestResolveErrors(t *testing.T) {
	host := loadHost(t, "dgx-a100")
	for _, tc := range []struct {
		name    string
		sharing []config.Sharing
		want    string
	}{
		{"no such index", []config.Sharing{mpsEntry(2, "9")}, `[[sharing]] entry 1: selector "9" matches no device: use a GPU index`},
		{"no such uuid", []config.Sharing{mpsEntry(2, "GPU-00000000-0000-0000-0000-000000000000")}, `selector "GPU-00000000-0000-0000-0000-000000000000" matches no device`},
		{"no such mig-N", []config.Sharing{mpsEntry(2, "mig-16")}, `selector "mig-16" matches no device`},
		{"no such G:M", []config.Sharing{mpsEntry(2, "4:7")}, `selector "4:7" matches no device`},
		{"G:M on a GPU without MIG", []config.Sharing{mpsEntry(2, "0:0")}, `selector "0:0" matches no device`},
		{"no such profile", []config.Sharing{mpsEntry(2, "1g.10gb")}, `selector "1g.10gb" matches no device`},
		{"MIG-enabled GPU by index", []config.Sharing{mpsEntry(2, "4")}, `[[sharing]] entry 1: selector "4" names GPU 4, which has MIG enabled: select its MIG instances (4:M, mig-N or a MIG profile)`},
		{"MIG-enabled GPU by uuid", []config.Sharing{mpsEntry(2, "GPU-6f55addc-717f-2b39-544e-c541eb7357da")}, `names GPU 4, which has MIG enabled`},
		{"claimed twice", []config.Sharing{mpsEntry(2, "0"), mpsEntry(2, "1"), mpsEntry(2, "all")},
			"[[sharing]] entry 3: GPU 0 (GPU-13fe3248-4da8-65f8-e972-3f15eef51793) is already shared by entry 1: a device takes one sharing entry"},
		{"claimed by profile and G:M", []config.Sharing{mpsEntry(2, "6:1"), mpsEntry(2, "3g.20gb")},
			"[[sharing]] entry 2: MIG device 6:1 (MIG-", // its UUID follows
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve(host, tc.sharing)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}
