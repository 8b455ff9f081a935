package mps

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/offer"
)

// pidFile is where the control daemon writes its pid, in its pipe folder.
const pidFile = "nvidia-cuda-mps-control.pid"

// pid returns the pid of the device's running daemon, 0 when none runs.
// The pipe folder is bind-mounted read-write into every replica container,
// so its pid file is read only when the state root has no pid, and no pid
// is trusted unless that process is the device's daemon (see isDaemon).
func (m *Manager) pid(d *offer.Share) int {
	rec, _ := m.readRecord(d.UUID())
	pipe := d.PipeDir()
	if rec.PID > 0 {
		if isDaemon(rec.PID, pipe, rec.MountNS) {
			return rec.PID
		}
		return 0
	}
	if pid := readPIDFile(filepath.Join(pipe, pidFile)); pid > 0 && isDaemon(pid, pipe, rec.MountNS) {
		return pid
	}
	// No pid file (or a stale one): look for a daemon serving this pipe.
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && isDaemon(pid, pipe, rec.MountNS) {
			return pid
		}
	}
	return 0
}

// kill sends SIGKILL to pid if it still is the device's daemon. The pidfd
// keeps the pid from being reused between the check and the signal.
func (m *Manager) kill(d *offer.Share, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	rec, _ := m.readRecord(d.UUID())
	if !isDaemon(pid, d.PipeDir(), rec.MountNS) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	// The pidfd turns readable when the process has exited; SIGKILL takes
	// effect within milliseconds unless the process is stuck in the kernel.
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(killWait)
	for {
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		if n > 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for pid %d to exit: %w", pid, err)
		}
		if err == nil || time.Until(deadline) <= 0 {
			return fmt.Errorf("pid %d did not exit within %s of SIGKILL", pid, killWait)
		}
	}
}

// killWait bounds how long kill waits for a killed daemon to exit.
const killWait = 2 * time.Second

// readPIDFile reads a pid file that a container may have replaced: only a
// regular file, not through a symlink, never blocking, at most 32 bytes.
// It returns 0 when there is no usable pid.
func readPIDFile(path string) int {
	// O_PATH opens nothing (no FIFO wait, no device open) until the file
	// is known to be a regular one.
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0
	}
	buf := make([]byte, 32)
	n, err := unix.Read(fd, buf)
	if err != nil || n <= 0 {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// isDaemon reports whether pid is the control daemon of pipe that gpuctk
// started: a control daemon serving pipe, in the mount namespace gpuctk
// made for it when mountNS is not 0, else at least sharing gpuctk's root
// folder. A container's process can take the daemon's name and
// environment, but neither its namespace nor the host's root.
func isDaemon(pid int, pipe string, mountNS uint64) bool {
	if !isControl(pid, pipe) {
		return false
	}
	if mountNS != 0 {
		var st unix.Stat_t
		return unix.Stat(fmt.Sprintf("/proc/%d/ns/mnt", pid), &st) == nil && st.Ino == mountNS
	}
	var root, own unix.Stat_t
	return unix.Stat(fmt.Sprintf("/proc/%d/root", pid), &root) == nil && unix.Stat("/proc/self/root", &own) == nil &&
		root.Dev == own.Dev && root.Ino == own.Ino
}

// isControl reports whether pid is a control daemon, serving pipe when
// pipe is not empty. Its name and environment alone prove nothing: see
// isDaemon.
func isControl(pid int, pipe string) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	// The kernel keeps 15 characters of the name.
	if err != nil || strings.TrimSpace(string(comm)) != controlName[:15] {
		return false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// A zombie has quit already.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			return false
		}
	}
	if pipe == "" {
		return true
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return err == nil && slices.Contains(strings.Split(string(environ), "\x00"), "CUDA_MPS_PIPE_DIRECTORY="+pipe)
}
