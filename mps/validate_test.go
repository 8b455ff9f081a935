package mps

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
)

// fakeDriverRoot returns a driver root holding an executable
// usr/bin/nvidia-cuda-mps-control.
func fakeDriverRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(root, "usr/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, controlName), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	a100 = Device{Name: "0", GPUIndex: 0, MIGIndex: -1, UUID: "GPU-a", ParentUUID: "GPU-a", MemoryMiB: 40960, ComputeMajor: 8}
	p100 = Device{Name: "1", GPUIndex: 1, MIGIndex: -1, UUID: "GPU-p", ParentUUID: "GPU-p", MemoryMiB: 16384, ComputeMajor: 6}
	mig1 = Device{Name: "mig-0", GPUIndex: 4, MIGIndex: 0, UUID: "MIG-m", ParentUUID: "GPU-g", MemoryMiB: 4864, ComputeMajor: 8, SMCount: 14}
)

// shared returns d shared through MPS, as config.Resolve and NewDevice
// would describe it.
func shared(d Device, replicas, percent int, limit config.Size) Device {
	gpu := &inventory.GPU{Index: d.GPUIndex, UUID: d.ParentUUID, MemoryMiB: d.MemoryMiB}
	if d.ComputeMajor > 0 {
		gpu.ComputeCapability = fmt.Sprintf("%d.0", d.ComputeMajor)
	}
	dev := inventory.Device{GPU: gpu, Ordinal: -1}
	if d.MIGIndex >= 0 {
		gpu.MemoryMiB, gpu.MIGEnabled = 40960, true
		dev.MIG, dev.Ordinal = &inventory.MIGDevice{Index: d.MIGIndex, UUID: d.UUID, MemoryMiB: d.MemoryMiB, SMCount: d.SMCount}, 0
	}
	sh := config.Sharing{Devices: []string{d.UUID}, Strategy: config.MPS, Replicas: replicas,
		ActiveThreadPercentage: percent, PinnedMemoryLimit: limit}
	return NewDevice(config.Shared{Device: dev, Sharing: &sh, Entry: 1})
}

func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		d        Device
		percent  int
		limitMiB uint64
	}{
		{shared(a100, 4, 0, 0), 25, 10240},
		{shared(a100, 3, 0, 0), 33, 13653},
		{shared(a100, 48, 0, 0), 2, 853},
		{shared(a100, 4, 40, 20<<30), 40, 20480},
		{shared(mig1, 7, 0, 0), 14, 694},
		{shared(mig1, 2, 0, 1536<<20), 50, 1536},
	} {
		if p, l := tc.d.ThreadPercentage, tc.d.PinnedMemoryMiB; p != tc.percent || l != tc.limitMiB {
			t.Errorf("%s with %+v: %d%%, %dMiB; want %d%%, %dMiB", tc.d, tc.d.Sharing, p, l, tc.percent, tc.limitMiB)
		}
	}
}

func TestMaxReplicas(t *testing.T) {
	for _, tc := range []struct {
		d    Device
		want int
	}{
		{a100, 48},
		{p100, 16},
		{mig1, 14},
		{Device{MIGIndex: 0, ComputeMajor: 9, SMCount: 66}, 48},
		{Device{MIGIndex: -1}, 48}, // compute capability unknown
	} {
		if got := tc.d.MaxReplicas(); got != tc.want {
			t.Errorf("%+v: MaxReplicas = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	root := fakeDriverRoot(t)
	for _, tc := range []struct {
		name string
		d    Device
		want string // "" when valid
	}{
		{"valid", shared(a100, 4, 25, 20<<30), ""},
		{"defaults", shared(a100, 48, 0, 0), ""},
		{"pre-Volta at its limit", shared(p100, 16, 0, 0), ""},
		{"MIG at its limit", shared(mig1, 14, 0, 0), ""},
		{"one replica", shared(a100, 1, 0, 0),
			"MPS device GPU 0 (GPU-a): replicas is 1: MPS sharing needs from 2 to 48 replicas"},
		{"too many replicas", shared(a100, 49, 0, 0),
			"MPS device GPU 0 (GPU-a): replicas is 49: at most 48 (the most clients an MPS server takes)"},
		{"too many replicas before Volta", shared(p100, 17, 0, 0),
			"MPS device GPU 1 (GPU-p): replicas is 17: at most 16 (the most clients an MPS server takes on a GPU older than Volta)"},
		{"too many replicas on a small MIG instance", shared(mig1, 15, 0, 0),
			"MPS device MIG device 4:0 (MIG-m): replicas is 15: at most 14 (one client per SM of this MIG instance, which has 14)"},
		{"thread percentage above 100", shared(a100, 2, 101, 0),
			"MPS device GPU 0 (GPU-a): active-thread-percentage is 101: it must be from 1 to 100"},
		{"memory limit above device memory", shared(a100, 2, 0, 41<<30),
			"MPS device GPU 0 (GPU-a): pinned-memory-limit is 41984MiB: the device has only 40960MiB"},
		{"memory limit above MIG memory", shared(mig1, 2, 0, 5<<30),
			"MPS device MIG device 4:0 (MIG-m): pinned-memory-limit is 5120MiB: the device has only 4864MiB"},
		{"memory limit below 1MiB", shared(a100, 2, 0, 4096),
			"MPS device GPU 0 (GPU-a): pinned-memory-limit is 4096 bytes: it must be at least 1MiB"},
		{"memory unknown", shared(Device{Name: "0", MIGIndex: -1, UUID: "GPU-x", ParentUUID: "GPU-x", ComputeMajor: 8}, 2, 0, 0),
			"MPS device GPU 0 (GPU-x): its memory size is unknown: set pinned-memory-limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate([]Device{tc.d}, root)
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

func TestValidateBinary(t *testing.T) {
	empty := t.TempDir()
	err := Validate([]Device{shared(a100, 2, 0, 0)}, empty)
	want := "driver root " + empty + ": nvidia-cuda-mps-control is not in /usr/bin, /usr/sbin, /bin, /sbin, /usr/local/bin, /usr/local/nvidia/bin: install the driver's MPS binaries or pass the right --driver-root"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	// Not executable is not there.
	os.MkdirAll(filepath.Join(empty, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(empty, "usr/bin", controlName), nil, 0o644)
	if err := Validate([]Device{shared(a100, 2, 0, 0)}, empty); err == nil {
		t.Fatal("a file without exec permission passed")
	}
	// The other folders count.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/local/nvidia/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/local/nvidia/bin", controlName), nil, 0o755)
	if p, err := FindControl(root); err != nil || p != filepath.Join(root, "usr/local/nvidia/bin", controlName) {
		t.Fatalf("FindControl = %s, %v", p, err)
	}
}

func TestValidateReportsEveryFailure(t *testing.T) {
	ts := shared(a100, 100, 0, 0)
	ts.Sharing.Strategy = config.TimeSlicing // not MPS: not checked here
	err := Validate([]Device{shared(a100, 49, 0, 41<<30), shared(p100, 17, 0, 0), ts}, t.TempDir())
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines (two for GPU 0, one for GPU 1, one for the binary), got:\n%s", err)
	}
	for i, prefix := range []string{"MPS device GPU 0 (GPU-a): replicas", "MPS device GPU 0 (GPU-a): pinned-memory-limit", "MPS device GPU 1 (GPU-p): replicas", "driver root "} {
		if !strings.HasPrefix(lines[i], prefix) {
			t.Errorf("line %d = %q, want prefix %q", i+1, lines[i], prefix)
		}
	}
}
