// Package mps runs one CUDA MPS control daemon per MPS-shared device (a
// full GPU or a MIG instance) and describes what a container needs to be a
// client of it.
//
// Which devices are shared comes from the [[sharing]] entries of the
// configuration, resolved against the host's inventory by config.Resolve;
// Devices keeps those shared through MPS. A Manager validates every MPS-shared device, then starts
// nvidia-cuda-mps-control -d from the driver root for each, with
// CUDA_VISIBLE_DEVICES set to the device's UUID and its pipe, log and
// /dev/shm folders under a state root (default /run/gpuctk/mps/<uuid>):
//
//	<state-root>/<uuid>/pipe   CUDA_MPS_PIPE_DIRECTORY, the control socket
//	<state-root>/<uuid>/log    CUDA_MPS_LOG_DIRECTORY, control.log
//	<state-root>/<uuid>/shm    a tmpfs, the daemon's and its clients' /dev/shm
//	<state-root>/<uuid>/device.json            the device the daemon serves
//	<state-root>/compute-mode/<gpu-uuid>       the compute mode to restore
//
// The daemon runs in a private mount namespace where the device's tmpfs is
// mounted on /dev/shm, so the server and its clients (containers that get
// the same tmpfs at /dev/shm through ReplicaEdits) share memory through it
// and through nothing else on the host.
//
// Once a daemon answers, the Manager sets its default active thread
// percentage and pinned device memory limit, so a client that drops the
// environment ReplicaEdits gives it still gets at most its share. While any
// daemon runs on a GPU, the GPU is kept in EXCLUSIVE_PROCESS compute mode
// (optional), and the previous mode is restored when the last one stops.
// Heal, which `gpuctk mps run` calls every HealInterval, restarts a daemon
// that lost its control socket, hangs or died; Start does the same to such
// a device.
//
// ReplicaEdits gives the CDI container edits of one replica: the client
// environment, the pipe and shm mounts, and a gpuctk-hook mps-check call
// that fails container creation with an actionable message when the
// device's daemon is not running.
package mps
