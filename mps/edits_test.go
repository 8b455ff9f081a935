package mps

import (
	"encoding/json"
	"testing"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

func TestReplicaEdits(t *testing.T) {
	mig := inventory.Device{GPU: &inventory.GPU{Index: 4, UUID: "GPU-g"}, MIG: &inventory.MIGDevice{UUID: "MIG-m"}}
	d := &offer.Share{Device: mig, Strategy: "mps", Replicas: 4, ThreadPercentage: 25, PinnedMemoryMiB: 1216, Dir: "/run/gpuctk/mps/MIG-m"}
	got := ReplicaEdits("/usr/bin/gpuctk-hook", d)
	opts := []string{"bind", "rw", "nosuid", "nodev", "noexec"}
	want := specs.ContainerEdits{
		Env: []string{
			"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1216M",
		},
		Mounts: []*specs.Mount{
			{HostPath: "/run/gpuctk/mps/MIG-m/pipe", ContainerPath: "/tmp/nvidia-mps", Type: "bind", Options: opts},
			{HostPath: "/run/gpuctk/mps/MIG-m/shm", ContainerPath: "/dev/shm", Type: "bind", Options: opts},
		},
		Hooks: []*specs.Hook{{
			HookName: "createContainer",
			Path:     "/usr/bin/gpuctk-hook",
			Args:     []string{"gpuctk-hook", "mps-check", "--pipe-dir", "/run/gpuctk/mps/MIG-m/pipe", "--uuid", "MIG-m"},
		}},
	}
	g, _ := json.MarshalIndent(got, "", "  ")
	w, _ := json.MarshalIndent(want, "", "  ")
	if string(g) != string(w) {
		t.Errorf("edits:\n%s\nwant:\n%s", g, w)
	}

	// The share's limits are the client's.
	gpu := inventory.Device{GPU: &inventory.GPU{UUID: "GPU-a"}, Ordinal: -1}
	got = ReplicaEdits("/h", &offer.Share{Device: gpu, Strategy: "mps", Replicas: 4, ThreadPercentage: 40, PinnedMemoryMiB: 20480, Dir: "/s/GPU-a"})
	if got.Env[1] != "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40" || got.Env[2] != "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M" {
		t.Errorf("env = %q", got.Env)
	}
	// The CDI library accepts them and they replace the runtime's /dev/shm.
	ce := cdi.ContainerEdits{ContainerEdits: &got}
	if err := ce.Validate(); err != nil {
		t.Fatal(err)
	}
	oci := &rspec.Spec{Mounts: []rspec.Mount{{Destination: "/dev/shm", Type: "tmpfs", Source: "shm"}}}
	if err := ce.Apply(oci); err != nil {
		t.Fatal(err)
	}
	var shm []string
	for _, m := range oci.Mounts {
		if m.Destination == "/dev/shm" {
			shm = append(shm, m.Source)
		}
	}
	if len(shm) != 1 || shm[0] != "/s/GPU-a/shm" {
		t.Errorf("/dev/shm mounts from %q, want only /s/GPU-a/shm", shm)
	}
}
