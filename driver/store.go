package driver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Where the driver's files are on a file system the folder's store is
// not (a read-only squashfs prefix, the device plugin's read-only view of
// the host's /, a host whose /usr and /var are partitions of their own),
// no hard link can be made. A group no host folder can give whole is then
// put in a store on a file system gpuctk can write as copies: cloned
// (FICLONE) where that file system shares blocks (XFS, btrfs), copied
// otherwise, within a bound and leaving free space.

// Copy limits by default: a full driver's libraries take some 1.2 GiB.
const (
	DefaultMaxCopy  = 4 << 30
	DefaultKeepFree = 1 << 30
)

// FolderOption changes where and how Gather makes the driver folder.
type FolderOption func(*gatherer)

// WithStore has Gather put the files it cannot hard link under the driver
// root in dir (where gpuctk sees it: a host folder when the spec is to
// name it, such as the device plugin's hostPath at the same path); make
// says whether Gather may create dir itself.
func WithStore(dir string, make bool) FolderOption {
	return func(g *gatherer) { g.store, g.makeStore = dir, make }
}

// WithCopyLimits bounds the copies Gather makes in a store folder: at most
// maxCopy bytes a folder, and never leaving the store's file system with
// less than keepFree bytes free. Clones take no space and count for none.
func WithCopyLimits(maxCopy, keepFree int64) FolderOption {
	return func(g *gatherer) { g.maxCopy, g.keepFree = maxCopy, keepFree }
}

// gatherer is how one Gather makes its folder.
type gatherer struct {
	store             string
	makeStore         bool
	maxCopy, keepFree int64
}

// fill puts each file into tmp, its group's sub-folder: a hard link, or
// with copies set, a clone or a copy of what cannot be linked.
func (g *gatherer) fill(tmp string, files []gathered, copies bool) error {
	var copied int64
	for _, f := range files {
		dst := filepath.Join(tmp, f.group, f.name)
		if _, err := os.Lstat(filepath.Dir(dst)); errors.Is(err, fs.ErrNotExist) {
			if err := os.Mkdir(filepath.Dir(dst), 0o755); err != nil {
				return fmt.Errorf("driver folder: %w", err)
			}
			copyLabel(filepath.Dir(f.m.HostPath), filepath.Dir(dst))
		}
		if f.ref != "" {
			if err := os.Symlink(f.ref, dst); err != nil {
				return fmt.Errorf("driver folder: %w", err)
			}
			continue
		}
		err := unix.Linkat(unix.AT_FDCWD, f.m.HostPath, unix.AT_FDCWD, dst, 0)
		if err == nil {
			continue
		}
		if !copies || !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("driver folder: hard link of %s into %s: %w", f.m.HostPath, filepath.Dir(tmp), err)
		}
		n, err := g.copyFile(f, dst, copied)
		if err != nil {
			return fmt.Errorf("driver folder: copy of %s into %s: %w", f.m.HostPath, filepath.Dir(tmp), err)
		}
		copied += n
	}
	return nil
}

// copyFile makes dst a clone or a copy of f's file, as Gather found it
// (the same inode, not a file swapped in since: opened without following
// a link or blocking), with its permissions (no set-id bits), its
// modification time (holds checks it) and its SELinux label, written to
// the disk. It returns the bytes copied: 0 for a clone.
func (g *gatherer) copyFile(f gathered, dst string, copied int64) (int64, error) {
	fd, err := unix.Open(f.m.HostPath, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	src := os.NewFile(uintptr(fd), f.m.HostPath)
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != f.st.Dev || st.Ino != f.st.Ino || st.Size != f.st.Size {
		return 0, errors.New("the file changed while the folder was made: run again")
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(st.Mode&0o777))
	if err != nil {
		return 0, err
	}
	defer out.Close()
	var n int64
	if unix.IoctlFileClone(int(out.Fd()), fd) != nil {
		if err := g.roomFor(filepath.Dir(dst), copied, st.Size); err != nil {
			return 0, err
		}
		if n, err = out.ReadFrom(io.LimitReader(src, st.Size)); err != nil {
			return 0, err
		}
		if n != st.Size {
			return 0, fmt.Errorf("read %d bytes of %d", n, st.Size)
		}
	}
	if err := out.Chmod(os.FileMode(st.Mode & 0o777)); err != nil {
		return 0, err
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, err
	}
	copyLabel(f.m.HostPath, dst)
	if err := out.Sync(); err != nil {
		return 0, err
	}
	return n, out.Close()
}

// roomFor refuses a copy of size bytes into dir past the limits, copied
// bytes having been copied into the folder already.
func (g *gatherer) roomFor(dir string, copied, size int64) error {
	maxCopy, keepFree := g.maxCopy, g.keepFree
	if maxCopy == 0 {
		maxCopy, keepFree = DefaultMaxCopy, DefaultKeepFree
	}
	if copied+size > maxCopy {
		return fmt.Errorf("the copies would take more than %s, the bound on a folder's copies", bytesText(maxCopy))
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return err
	}
	if free := int64(sfs.Bavail) * sfs.Bsize; free-size < keepFree {
		return fmt.Errorf("%s free there, and copies leave at least %s free", bytesText(free), bytesText(keepFree))
	}
	return nil
}

// bytesText is a size in MiB, or bytes under one.
func bytesText(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
