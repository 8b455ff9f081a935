package mps

import (
	"fmt"
	"os"
	"strconv"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/mps/peer"
	"github.com/gpuctk/gpuctk/offer"
)

// ContainerPipeDir is where a client finds its daemon's pipe directory,
// and HookCommand the gpuctk-hook subcommand that checks a daemon answers.
const (
	ContainerPipeDir = peer.ContainerPipeDir
	HookCommand      = peer.HookCommand
)

// ReplicaEdits returns what an MPS replica of d adds to the device's own
// edits: the client environment, the daemon's pipe directory and /dev/shm,
// and a createContainer hook that refuses the container when the daemon is
// not running. Every replica of a device gets the same edits.
func ReplicaEdits(hookPath string, d *offer.Share) specs.ContainerEdits {
	pipe := d.PipeDir()
	opts := []string{"bind", "rw", "nosuid", "nodev", "noexec"}
	return specs.ContainerEdits{
		Env: []string{
			"CUDA_MPS_PIPE_DIRECTORY=" + ContainerPipeDir,
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + strconv.Itoa(d.ThreadPercentage),
			// The device is ordinal 0 inside the container.
			fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dM", d.PinnedMemoryMiB),
		},
		Mounts: []*specs.Mount{
			{HostPath: pipe, ContainerPath: ContainerPipeDir, Type: "bind", Options: opts},
			{HostPath: d.ShmDir(), ContainerPath: "/dev/shm", Type: "bind", Options: opts},
		},
		Hooks: []*specs.Hook{{
			HookName: "createContainer",
			Path:     hookPath,
			Args:     []string{"gpuctk-hook", HookCommand, "--pipe-dir", pipe, "--uuid", d.UUID()},
		}},
	}
}

// MountPoints makes, where missing, the two host folders an MPS replica's
// edits bind-mount (the daemon's pipe folder and its /dev/shm), empty and
// owned by root. Whoever writes the spec calls it: on a fresh boot no
// daemon has made them yet, and a missing mount source fails the container
// in the low-level runtime ("stat …: no such file or directory") before
// the spec's mps-check hook can refuse it with what to do. With the
// folders there, the hook runs and names the daemon and `gpuctk mps
// start`; `mps start` mounts each daemon's own tmpfs over them.
func MountPoints(devs []*offer.Share) error {
	for _, d := range devs {
		for _, dir := range []string{d.PipeDir(), d.ShmDir()} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("MPS device %s: %w", d, err)
			}
		}
	}
	return nil
}
