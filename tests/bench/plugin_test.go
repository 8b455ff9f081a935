package main

import (
	"strings"
	"testing"
	"time"
)

// TestPodPhases splits a pod's start at the CRI lines containerd 2.x logs
// for it, skipping another pod's lines in between.
func TestPodPhases(t *testing.T) {
	log := strings.Join([]string{
		`time="2026-11-23T21:51:11.100000000Z" level=info msg="RunPodSandbox for name:\"other-vm\"  uid:\"1\"  namespace:\"default\""`,
		`time="2026-11-23T21:51:11.134000000Z" level=info msg="RunPodSandbox for name:\"gpu-2-vm\"  uid:\"8a\"  namespace:\"default\""`,
		`time="2026-11-23T21:51:11.174000000Z" level=info msg="connecting to shim 7e59" address="unix:///run/containerd/s/4a" namespace=k8s.io protocol=ttrpc version=3`,
		`time="2026-11-23T21:51:11.248000000Z" level=info msg="RunPodSandbox for name:\"gpu-2-vm\"  uid:\"8a\"  namespace:\"default\" returns sandbox id \"7e59\""`,
		`time="2026-11-23T21:51:11.250000000Z" level=info msg="CreateContainer within sandbox \"ffff\" for container name:\"c\""`,
		`time="2026-11-23T21:51:11.252000000Z" level=info msg="CreateContainer within sandbox \"7e59\" for container name:\"c\""`,
		`time="2026-11-23T21:51:11.260000000Z" level=info msg="CreateContainer within sandbox \"7e59\" for name:\"c\" returns container id \"1796\""`,
		`time="2026-11-23T21:51:11.262000000Z" level=info msg="StartContainer for \"1796\""`,
		`time="2026-11-23T21:51:11.338000000Z" level=info msg="StartContainer for \"1796\" returns successfully"`,
	}, "\n")
	at := func(s string) time.Time {
		t0, err := time.Parse(time.RFC3339Nano, "2026-11-23T21:51:"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return t0
	}
	got, err := podPhases([]byte(log), "gpu-2-vm", at("11.000"), at("11.330"))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{134, 114, 4, 8, 2, 68}
	if len(got) != len(want) || len(got) != len(phaseNames) {
		t.Fatalf("phases = %v, want %v ms", got, want)
	}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Errorf("phase %d (%s) = %v, want %v ms", i+1, phaseNames[i], got[i], want[i])
		}
	}
	if _, err := podPhases([]byte(log), "gpu-3-vm", at("11.000"), at("11.330")); err == nil || !strings.Contains(err.Error(), "0 of the 5") {
		t.Errorf("a pod the log does not name: err = %v, want one saying 0 of the 5 calls were found", err)
	}
}
