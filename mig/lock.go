package mig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultLockPath is the lock of a real host's MIG layout.
const DefaultLockPath = "/run/gpuctk/mig.lock"

// Lock takes the lock that keeps two applies from changing a host's MIG
// layout at once: an exclusive flock on the file at path, made (with its
// folder) where missing. It does not wait: when another process holds it,
// the error names that process and the file, and nothing has been
// changed. The kernel lets go when the process exits, however it exits,
// so a holder that crashed leaves no stale lock; the file stays, holding
// the pid of its last holder. release closes it.
//
// Plan under the lock: a plan made before it could be from the layout
// the other apply was replacing.
func Lock(path string) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("MIG lock: %w", err)
	}
	// O_NONBLOCK: a FIFO put there must not hang the open; it is refused
	// below.
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	notFile := fmt.Errorf("MIG lock %s: not a regular file: remove it and run again", path)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EISDIR) {
		return nil, notFile
	}
	if err != nil {
		return nil, fmt.Errorf("MIG lock: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, notFile
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer unix.Close(fd)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("MIG lock %s: %w", path, err)
		}
		holder := "another gpuctk mig apply"
		if pid := lockHolder(fd); pid > 0 {
			holder += fmt.Sprintf(" (pid %d)", pid)
		}
		return nil, fmt.Errorf("%s is changing the MIG layout (it holds %s): nothing was changed; run apply again once it has finished", holder, path)
	}
	// The pid is for the message above only: the flock is the lock.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := unix.Ftruncate(fd, 0); err == nil {
		_, _ = unix.Pwrite(fd, pid, 0)
	}
	return func() { unix.Close(fd) }, nil
}

// lockHolder reads the pid the lock's holder wrote: 0 when there is none
// to read. The read is bounded: the file is ours, but a pid is short.
func lockHolder(fd int) int {
	buf := make([]byte, 24)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil || n <= 0 {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
