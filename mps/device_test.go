package mps

import (
	"reflect"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/fakehost"
)

// dgxDevices resolves sharing entries on the dgx-a100 profile and returns
// the MPS-shared devices.
func dgxDevices(t *testing.T, sharing ...config.Sharing) []Device {
	t.Helper()
	cfg := &config.Config{Sharing: sharing}
	shared, err := cfg.Resolve(fakehost.Host(t, "dgx-a100"))
	if err != nil {
		t.Fatal(err)
	}
	return Devices(shared)
}

func TestDevices(t *testing.T) {
	devs := dgxDevices(t,
		config.Sharing{Devices: []string{"7:2", "2"}, Strategy: config.MPS, Replicas: 4},
		config.Sharing{Devices: []string{"1"}, Strategy: config.TimeSlicing, Replicas: 4},
		config.Sharing{Devices: []string{"6:0"}, Strategy: config.MPS, Replicas: 2, ActiveThreadPercentage: 30, PinnedMemoryLimit: 8 << 30},
	)
	want := []Device{
		{Name: "2", GPUIndex: 2, MIGIndex: -1, UUID: "GPU-18909d70-187a-d774-bf80-dcda749edaf4", ParentUUID: "GPU-18909d70-187a-d774-bf80-dcda749edaf4",
			MemoryMiB: 40960, ComputeMajor: 8, Entry: 1, ThreadPercentage: 25, PinnedMemoryMiB: 10240},
		{Name: "mig-10", GPUIndex: 6, MIGIndex: 0, UUID: "MIG-05dc9572-2b06-1f79-31a3-695087f6dd02", ParentUUID: "GPU-9ae25e83-2fb9-7d25-982c-9aa33cf40ea7",
			MemoryMiB: 19968, ComputeMajor: 8, SMCount: 42, Entry: 3, ThreadPercentage: 30, PinnedMemoryMiB: 8192},
		{Name: "mig-14", GPUIndex: 7, MIGIndex: 2, UUID: "MIG-274ba80d-9427-994a-b610-1e6c62975ed4", ParentUUID: "GPU-6031c12e-e245-fc45-1cf6-d8e948ef41fa",
			MemoryMiB: 4864, ComputeMajor: 8, SMCount: 14, Entry: 1, ThreadPercentage: 25, PinnedMemoryMiB: 1216},
	}
	if len(devs) != len(want) {
		t.Fatalf("got %d devices: %+v", len(devs), devs)
	}
	for i, w := range want {
		g := devs[i]
		w.Sharing = g.Sharing
		if !reflect.DeepEqual(g, w) {
			t.Errorf("device %d:\n%+v\nwant\n%+v", i, g, w)
		}
	}
	if devs[0].Sharing.Replicas != 4 || devs[1].Sharing.PinnedMemoryLimit != 8<<30 {
		t.Errorf("sharing entries: %+v, %+v", devs[0].Sharing, devs[1].Sharing)
	}
	if s := devs[2].String(); s != "MIG device 7:2 (MIG-274ba80d-9427-994a-b610-1e6c62975ed4)" {
		t.Errorf("String = %q", s)
	}
}
