package mps

import (
	"fmt"
	"path/filepath"
	"strconv"

	"tags.cncf.io/container-device-interface/specs-go"
)

// ContainerPipeDir is where a client finds its daemon's pipe directory.
const ContainerPipeDir = "/tmp/nvidia-mps"

// HookCommand is the gpuctk-hook subcommand that checks a daemon answers.
const HookCommand = "mps-check"

// PipeDir returns the host folder of a device's control socket.
func PipeDir(stateRoot, uuid string) string { return filepath.Join(stateRoot, uuid, "pipe") }

// LogDir returns the host folder of a device's daemon logs.
func LogDir(stateRoot, uuid string) string { return filepath.Join(stateRoot, uuid, "log") }

// ShmDir returns the host mount point of a device's /dev/shm tmpfs.
func ShmDir(stateRoot, uuid string) string { return filepath.Join(stateRoot, uuid, "shm") }

// ReplicaEdits returns what an MPS replica of d adds to the device's own
// edits: the client environment, the daemon's pipe directory and /dev/shm,
// and a createContainer hook that refuses the container when the daemon is
// not running. Every replica of a device gets the same edits.
func ReplicaEdits(stateRoot, hookPath string, d Device) specs.ContainerEdits {
	pipe := PipeDir(stateRoot, d.UUID)
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
			{HostPath: ShmDir(stateRoot, d.UUID), ContainerPath: "/dev/shm", Type: "bind", Options: opts},
		},
		Hooks: []*specs.Hook{{
			HookName: "createContainer",
			Path:     hookPath,
			Args:     []string{"gpuctk-hook", HookCommand, "--pipe-dir", pipe, "--uuid", d.UUID},
		}},
	}
}
