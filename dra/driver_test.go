package dra

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

const testDriver = "gpu.gpuctk.io"

// claim returns an allocated claim for devices of testDriver, request
// "req-<i>" for the i-th, with opaque configs (JSON) from the claim.
func claim(uid, name string, devices []string, configs ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "default", Name: name}}
	alloc := &resourceapi.AllocationResult{}
	for i, d := range devices {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "req-" + string(rune('0'+i)), Driver: testDriver, Pool: "node-a", Device: d})
	}
	for _, p := range configs {
		alloc.Devices.Config = append(alloc.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: testDriver, Parameters: runtime.RawExtension{Raw: []byte(p)}}}})
	}
	c.Status.Allocation = alloc
	return c
}

func newDriver(t *testing.T, path, profile, toml string) *Driver {
	t.Helper()
	d, err := NewDriver(testDriver, path)
	if err != nil {
		t.Fatal(err)
	}
	d.SetState(NewState(resolve(t, profile, toml), "nvidia.com/gpu"))
	return d
}

func cdiNames(devs []PreparedDevice) string {
	var out []string
	for _, d := range devs {
		out = append(out, d.CDI...)
	}
	return strings.Join(out, " ")
}

// TestPrepareRestartUnprepare: a prepared claim gets its devices' CDI
// names, again when asked again; a driver started anew on the same
// checkpoint knows it and unprepares it, twice without error.
func TestPrepareRestartUnprepare(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	d := newDriver(t, path, "dgx-a100", "")
	c := claim("uid-1", "two", []string{"gpu-0", "mig-4-1"})
	got, err := d.Prepare(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := "nvidia.com/gpu=0 nvidia.com/gpu=mig-1"; cdiNames(got) != want {
		t.Errorf("CDI names %q, want %q", cdiNames(got), want)
	}
	again, err := d.Prepare(c)
	if err != nil || cdiNames(again) != cdiNames(got) {
		t.Errorf("prepared again: %q, %v", cdiNames(again), err)
	}

	restarted := newDriver(t, path, "dgx-a100", "")
	if p, ok := restarted.Prepared()["uid-1"]; !ok || p.Name != "two" || cdiNames(p.Devices) != cdiNames(got) {
		t.Fatalf("restarted driver's claims: %+v", restarted.Prepared())
	}
	for range 2 {
		if err := restarted.Unprepare("uid-1"); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "uid-1") {
		t.Errorf("checkpoint still has the unprepared claim:\n%s", data)
	}
	if len(newDriver(t, path, "dgx-a100", "").Prepared()) != 0 {
		t.Error("a driver restarted after the unprepare knows the claim")
	}
}

// TestPrepareRefused: each claim the driver cannot prepare gets one line
// naming the claim, the device or request and what to do; nothing is
// checkpointed for it.
func TestPrepareRefused(t *testing.T) {
	const head = `{"apiVersion":"gpu.gpuctk.io/v1alpha1","kind":"GpuConfig"`
	const sharing = "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 2\n[[sharing]]\ndevices = [\"1\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	d := newDriver(t, path, "dgx-a100", sharing)
	if _, err := d.Prepare(claim("uid-0", "first", []string{"gpu-2"})); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *resourceapi.ResourceClaim
		want string
	}{
		{"vanished", claim("uid-1", "gone", []string{"gpu-9"}),
			"claim default/gone: device gpu-9 (request req-0) is not on this node any more: its GPU, MIG layout or sharing changed since the claim was allocated; delete the pod for the claim to be allocated anew"},
		{"in-use", claim("uid-2", "second", []string{"gpu-2"}),
			"claim default/second: device gpu-2 (request req-0) is already prepared for claim default/first"},
		{"bad-config", claim("uid-3", "bad", []string{"gpu-3"}, `{"apiVersion":"v1","kind":"GpuConfig"}`),
			`claim default/bad: config 1 (FromClaim): GpuConfig: apiVersion is "v1": set "gpu.gpuctk.io/v1alpha1"`},
		{"mps-on-whole", claim("uid-4", "mps", []string{"gpu-3"}, head+`,"sharing":{"strategy":"mps"}}`),
			`claim default/mps: request req-0: device gpu-3 is not shared through MPS: MPS started for a claim is not supported yet; ask for a replica whose sharingStrategy is mps (a [[sharing]] entry with strategy = "mps")`},
		{"time-slice-mps", claim("uid-5", "ts", []string{"gpu-0-replica-1"}, head+`,"sharing":{"strategy":"time-slicing"}}`),
			"claim default/ts: request req-0: device gpu-0-replica-1 is a replica of GPU 0 (GPU-13fe3248-4da8-65f8-e972-3f15eef51793) shared through MPS (config: [[sharing]] entry 1): it cannot be time-sliced; ask for a device of type gpu, mig or a time-sliced replica"},
		{"mps-limits", claim("uid-6", "limits", []string{"gpu-0-replica-0"}, head+`,"sharing":{"strategy":"mps","mps":{"activeThreadPercentage":10}}}`),
			"claim default/limits: request req-0: device gpu-0-replica-0: MPS limits of a claim's own are not supported yet: its replicas have activeThreadPercentage 50 and pinnedMemoryLimit 20480MiB (config: [[sharing]] entry 1); leave sharing.mps out or set those"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Prepare(tc.c)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Prepare: %v\nwant: %s", err, tc.want)
			}
			if _, ok := d.Prepared()[tc.c.UID]; ok {
				t.Error("refused claim recorded as prepared")
			}
		})
	}
	// Accepted: MPS with the device's own limits, time-slicing of a
	// time-sliced replica.
	for i, c := range []*resourceapi.ResourceClaim{
		claim("ok-1", "mps", []string{"gpu-0-replica-0"}, head+`,"sharing":{"strategy":"mps","mps":{"activeThreadPercentage":50}}}`),
		claim("ok-2", "ts", []string{"gpu-1-replica-0"}, head+`,"sharing":{"strategy":"time-slicing"}}`),
	} {
		if _, err := d.Prepare(c); err != nil {
			t.Errorf("%d: %v", i, err)
		}
	}
}
