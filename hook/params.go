package hook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/internal/filekind"
)

// ParamsPath is where the NVIDIA kernel module publishes its parameters,
// in the host's and every container's procfs.
const ParamsPath = "/proc/driver/nvidia/params"

// maxParamsSize caps the host params file read: the 580 driver's is about
// 1.5 KiB.
const maxParamsSize = 64 << 10

// noModifyDeviceFiles returns params with "ModifyDeviceFiles: 1" turned
// to 0, and false when there is nothing to change (already 0, or no such
// line): the CUDA driver in a container creates missing /dev/nvidia*
// nodes itself when that line says 1, which gives the container GPUs the
// spec did not give it wherever it can mknod.
func noModifyDeviceFiles(params []byte) ([]byte, bool) {
	lines := bytes.SplitAfter(params, []byte("\n"))
	changed := false
	for i, l := range lines {
		if bytes.Equal(bytes.TrimRight(l, "\n"), []byte("ModifyDeviceFiles: 1")) {
			lines[i] = []byte("ModifyDeviceFiles: 0\n")
			changed = true
		}
	}
	return bytes.Join(lines, nil), changed
}

// readHostParams reads the host's params file (hostPath, from the spec:
// the dev root's /proc/driver/nvidia/params), without blocking on a FIFO
// and within maxParamsSize (procfs files have no size to check first).
func readHostParams(hostPath string) ([]byte, error) {
	f, err := os.OpenFile(hostPath, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, %w", hostPath, filekind.Name(st.Mode()), errNotRegular)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxParamsSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", hostPath, err)
	}
	if len(data) > maxParamsSize {
		return nil, fmt.Errorf("%s is %w of %d bytes", hostPath, errTooLarge, maxParamsSize)
	}
	return data, nil
}

// procMounted reports whether the container root's /proc is a procfs:
// the runtime mounts it in the container's mount namespace only, where a
// createContainer hook runs and a mount leaves the host untouched.
// Anywhere else (the host's namespace: an image's plain /proc folder), a
// mount would change the host's view, so the hook must not make one.
// (Comparing /proc/self/ns/mnt with the state's pid does not work: runc
// gives the pid as the container sees it, 1, and the host's pid 1 may be
// unreadable.)
func procMounted(rootFD int) (bool, error) {
	fd, err := unix.Openat2(rootFD, "proc", &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false, err
	}
	return st.Type == unix.PROC_SUPER_MAGIC, nil
}

// protectDeviceNodes bind-mounts, read-only, over the container's
// /proc/driver/nvidia/params a copy of the host's (hostPath) that says
// ModifyDeviceFiles: 0, as NVIDIA's disable-device-node-modification hook
// does. Nothing to cover (no driver on the host, no params in the
// container's procfs, the line already 0) is not an error: the hook says
// so under --debug.
//
// The copy is a file the hook creates in the bundle folder (the runtime's,
// on the host, removed with the container), clones as a detached bind
// mount (open_tree), and unlinks at once: the mount keeps it alive as
// long as the container's mount namespace, and nothing stays on the host
// after the hook, even for a crashed container. (A memfd or an O_TMPFILE
// file cannot be bind-mounted: the kernel refuses a source outside the
// caller's mount namespace, or unlinked, ENOENT.) The target is opened
// with RESOLVE_IN_ROOT and no symlinks at all, must be a regular file
// (procfs's is), and the mount goes onto that descriptor (move_mount),
// so no path the image controls is resolved twice.
func (s *setup) protectDeviceNodes(hostPath string) error {
	params, err := readHostParams(hostPath)
	if errors.Is(err, os.ErrNotExist) {
		s.env.debugf("no %s on the host (no driver loaded): container params left as they are", hostPath)
		return nil
	}
	if err != nil {
		return fmt.Errorf("driver params: %w", err)
	}
	params, changed := noModifyDeviceFiles(params)
	if !changed {
		s.env.debugf("%s does not say ModifyDeviceFiles: 1: nothing to cover", hostPath)
		return nil
	}
	// A container with its own user namespace cannot mknod a device node
	// whatever the params say, and cannot mount the copy from here.
	if !inInitialUserNS() {
		s.env.debugf("the container has a user namespace, where device nodes cannot be created: %s left as it is", ParamsPath)
		return nil
	}
	rootFD := s.rootFD
	if proc, err := procMounted(rootFD); err != nil || !proc {
		why := "/proc in the container root is not a procfs"
		if err != nil {
			why = err.Error()
		}
		s.warn("not in the container's mount namespace (%s; run as a createContainer hook?): %s not covered, so the container's CUDA driver may create device nodes", why, ParamsPath)
		return nil
	}
	target, err := unix.Openat2(rootFD, ParamsPath[1:], &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) {
		s.env.debugf("the container has no %s: nothing to cover", ParamsPath)
		return nil
	}
	if err != nil {
		return fmt.Errorf("container %s: %w", ParamsPath, err)
	}
	defer unix.Close(target)
	var st unix.Stat_t
	if err := unix.Fstat(target, &st); err != nil {
		return fmt.Errorf("container %s: %w", ParamsPath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("container %s is not a regular file (mode %o): the image planted it; refusing the container", ParamsPath, st.Mode)
	}

	src, err := os.CreateTemp(s.env.state.Bundle, ".gpuctk-params-*")
	if err != nil {
		return fmt.Errorf("driver params copy: %w", err)
	}
	defer src.Close()
	defer os.Remove(src.Name())
	if _, err := src.Write(params); err != nil {
		return fmt.Errorf("driver params copy %s: %w", src.Name(), err)
	}
	if err := src.Chmod(0o444); err != nil {
		return fmt.Errorf("driver params copy %s: %w", src.Name(), err)
	}
	tree, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("driver params copy %s: open_tree: %w", src.Name(), err)
	}
	defer unix.Close(tree)
	// Read-only so the container cannot turn the line back; no exec,
	// suid or devices: it is a text file.
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("driver params copy: mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount the driver params copy over the container's %s: %w", ParamsPath, err)
	}
	s.env.debugf("%s covered by a read-only copy of %s saying ModifyDeviceFiles: 0", ParamsPath, hostPath)
	return nil
}
