package mps

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/offer"
)

// The pipe folder is bind-mounted read-write into every replica container
// at /tmp/nvidia-mps: it is the one place a tenant can write. The daemon
// starts one MPS server per client user id, with that user id, and the
// server and clients make their named pipes and sockets in it, so it must
// be writable by any user: mode 1777, owned by root, on a tmpfs of its own
// whose size and inode count are capped, so a tenant filling it fills
// neither the host's /run nor anything but this device's pipe folder. The
// sticky bit keeps a tenant of another user id from removing or renaming
// the daemon's socket; a tenant running as root without a user namespace
// (container root is host root) can, and can plant what it likes: nothing
// gpuctk reads there is trusted (see answers, pid, clearDir, package peer).

// pipeInodes caps the files of a pipe folder: the daemon, a server per
// client user id and their pipes take tens.
const pipeInodes = 4096

// Bounds on what clearDir removes: a capped tmpfs holds at most pipeInodes
// entries, but the folder under it (used before the tmpfs existed) has no cap.
const (
	maxClearEntries = 1 << 16
	maxClearDepth   = 16
)

// mountPipe mounts the device's pipe tmpfs unless it is mounted, and gives
// its root folder back to root with mode 1777, which a tenant running as
// root may have changed.
func (m *Manager) mountPipe(d *offer.Share) error {
	pipe := d.PipeDir()
	if !isMountPoint(pipe) {
		opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=1777,uid=0,gid=0", uint64(m.pipeSize), pipeInodes)
		if err := unix.Mount("gpuctk-mps-pipe", pipe, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", pipe, err)
		}
	}
	fd, err := unix.Open(pipe, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", pipe, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, 0, 0); err != nil {
		return fmt.Errorf("chown %s: %w", pipe, err)
	}
	if err := unix.Fchmod(fd, 0o1777); err != nil {
		return fmt.Errorf("chmod %s: %w", pipe, err)
	}
	return nil
}

// resetPipe empties the pipe folder of a device whose daemon is not
// running. What a tenant left there cannot stop it: if the tmpfs cannot be
// emptied, it is replaced by a new one (containers that have the old one
// keep it).
func (m *Manager) resetPipe(d *offer.Share) error {
	pipe := d.PipeDir()
	if !isMountPoint(pipe) {
		return clearDir(pipe)
	}
	if clearDir(pipe) == nil {
		return nil
	}
	return m.unmountPipe(d)
}

// unmountPipe unmounts the device's pipe tmpfs, lazily (a container that
// has it keeps its copy), and empties the folder under it.
func (m *Manager) unmountPipe(d *offer.Share) error {
	pipe := d.PipeDir()
	if isMountPoint(pipe) {
		if err := unix.Unmount(pipe, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", pipe, err)
		}
	}
	return clearDir(pipe)
}

// clearDir removes what is in dir, keeping dir itself: containers that
// have it bind-mounted see the next daemon's socket there. It follows no
// link (every step is relative to a folder opened with O_NOFOLLOW), and
// gives up past maxClearDepth folders deep or maxClearEntries entries.
func clearDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	n := 0
	if err := clearAt(fd, 0, &n); err != nil {
		return fmt.Errorf("empty %s: %w", dir, err)
	}
	return nil
}

func clearAt(fd, depth int, n *int) error {
	if depth > maxClearDepth {
		return fmt.Errorf("folders nested over %d deep", maxClearDepth)
	}
	buf := make([]byte, 32<<10)
	for {
		// Read a batch, remove it, read again from the start: memory
		// stays bounded whatever the folder holds.
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return err
		}
		nb, err := unix.Getdents(fd, buf)
		if err != nil {
			return err
		}
		_, _, names := unix.ParseDirent(buf[:nb], -1, nil)
		if len(names) == 0 {
			return nil
		}
		for _, name := range names {
			if *n++; *n > maxClearEntries {
				return fmt.Errorf("over %d entries", maxClearEntries)
			}
			err := unix.Unlinkat(fd, name, 0)
			if errors.Is(err, unix.EISDIR) {
				err = clearSub(fd, name, depth, n)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
}

func clearSub(parent int, name string, depth int, n *int) error {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = clearAt(fd, depth+1, n)
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
}
