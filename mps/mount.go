package mps

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/internal/mountinfo"
	"github.com/gpuctk/gpuctk/offer"
)

// shmMounted reports whether the device's tmpfs is mounted.
func (m *Manager) shmMounted(d *offer.Share) bool {
	return isMountPoint(d.ShmDir())
}

// isMountPoint reports whether path is a mount point in gpuctk's mount
// namespace.
func isMountPoint(path string) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	path, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	if path, err = filepath.Abs(path); err != nil {
		return false
	}
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := mountinfo.Parse(sc.Text()); ok && m.Point == path {
			return true
		}
	}
	return false
}

// inShmNamespace runs fn on a thread in a new mount namespace where shm is
// mounted on /dev/shm, so a process fn starts (the daemon) and its
// children see that tmpfs as /dev/shm. It returns the namespace's
// inode number, by which the daemon is told from any other process. The
// namespace lives as long as the daemon.
func inShmNamespace(shm string, fn func() error) (uint64, error) {
	return inMountNamespace(func() error {
		if err := unix.Mount(shm, "/dev/shm", "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount %s on /dev/shm: %w", shm, err)
		}
		return nil
	}, fn)
}

// inMountNamespace runs setup, then fn, on a thread in a new mount
// namespace whose mounts are the host's, as slaves: what setup mounts
// there, and what a process fn starts sees, never propagates to the host.
// It returns the namespace's inode number. The namespace ends with the
// last process in it.
//
// The thread goes back to the host's namespace before the goroutine ends,
// and stays locked so Go discards it rather than reuse a thread whose
// file-system attributes are no longer shared: were it the main thread,
// which Go keeps, /proc/self would otherwise show the namespace's mounts.
func inMountNamespace(setup, fn func() error) (uint64, error) {
	type result struct {
		ns  uint64
		err error
	}
	errc := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/mnt")
		if err != nil {
			errc <- result{err: err}
			return
		}
		defer host.Close()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- result{err: fmt.Errorf("new mount namespace: %w", err)}
			return
		}
		defer func() {
			if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNS); err != nil {
				// Cannot happen for a thread that just unshared; if it
				// did, the thread must not live on.
				panic(fmt.Sprintf("mps: back to the host mount namespace: %v", err))
			}
		}()
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			errc <- result{err: fmt.Errorf("make mounts private: %w", err)}
			return
		}
		if err := setup(); err != nil {
			errc <- result{err: err}
			return
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/mnt", &st); err != nil {
			errc <- result{err: fmt.Errorf("new mount namespace: %w", err)}
			return
		}
		errc <- result{st.Ino, fn()}
	}()
	r := <-errc
	return r.ns, r.err
}
