package hook

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
)

// AppProfile is where the driver's EGL library reads a system-wide
// application profile: the container's own, written by the hook.
const AppProfile = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"

// maxDevEntries bounds the container's /dev the hook reads for GPU nodes:
// runc makes a few dozen there; an image cannot add to it before start.
const maxDevEntries = 4096

// appProfile makes EGL (and Vulkan through it) enumerate only the GPUs the
// container was given, as NVIDIA's toolkit does for graphics containers:
// without it the driver offers every GPU its /dev/nvidiactl can reach, and
// a rendering program picks one the container has no node for and fails.
// It writes AppProfile with EGLVisibleDGPUDevices, a mask of the minors of
// the /dev/nvidiaN nodes in the container, when eglLib (the driver's EGL
// vendor library, present only with capability-graphics) is in the root.
// The mask has 32 bits, as the driver documents; higher minors are left
// out with a warning.
func (s *setup) appProfile(eglLib string) error {
	if ok, err := s.present(eglLib, false); err != nil || !ok {
		if err == nil {
			s.env.debugf("application profile: %s is not in the container (no capability-graphics)", eglLib)
		}
		return err
	}
	// O_DIRECTORY and O_NONBLOCK: a FIFO there (no /dev mounted over the
	// image's) fails at once instead of blocking the open.
	dev, err := s.root.OpenFile("dev", os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("application profile: container /dev: %w", err)
	}
	defer dev.Close()
	entries, err := dev.ReadDir(maxDevEntries)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("application profile: container /dev: %w", err)
	}
	var mask uint64
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "nvidia")
		minor, err := strconv.Atoi(n)
		if !ok || err != nil || e.Type() != fs.ModeDevice|fs.ModeCharDevice {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || minorOf(st.Rdev) != uint32(minor) {
			continue // a node named for one GPU and opening another: not counted
		}
		if minor >= 32 {
			s.warn("application profile: /dev/nvidia%d is past EGLVisibleDGPUDevices' 32 bits: EGL will not see it", minor)
			continue
		}
		mask |= 1 << minor
	}
	if mask == 0 {
		s.env.debugf("application profile: no /dev/nvidiaN in the container")
		return nil
	}
	data := fmt.Sprintf(`{"profiles": [{"name": "_container_", "settings": ["EGLVisibleDGPUDevices", %#x]}], "rules": [{"pattern": [], "profile": "_container_"}]}`+"\n", mask)
	rel := strings.TrimPrefix(AppProfile, "/")
	if err := s.mkdirs(path.Dir(AppProfile)); err != nil {
		return fmt.Errorf("application profile: %w", err)
	}
	// Not synced: see mergeCache.
	if err := atomicfile.WriteFileIn(s.root, rel, []byte(data), 0o644, false); err != nil {
		return fmt.Errorf("application profile: %w", err)
	}
	s.env.debugf("application profile: EGLVisibleDGPUDevices %#x", mask)
	return s.chown(rel)
}

// minorOf is the minor number of a device number, as glibc's minor().
func minorOf(dev uint64) uint32 {
	return uint32((dev & 0xff) | ((dev >> 12) & 0xffffff00))
}
