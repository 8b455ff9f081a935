package hook

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// folder is a folder of the container root the hook works in: links are
// made, read and removed by their names in it (one component, no slash).
// *os.Root is one; dirFD, opened with one openat2, is the fast one.
type folder interface {
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
	Remove(name string) error
	Symlink(oldname, newname string) error
	Link(oldname, newname string) error
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Rename(oldname, newname string) error
}

// openFolder opens rel (a folder path relative to the root rootFD) in one
// openat2 call that refuses, as os.Root does, any resolution leaving the
// root: an absolute link, a ".." above it, a /proc magic link. It returns
// errors.ErrUnsupported where the kernel lacks openat2 (before 5.6) or a
// seccomp filter refuses it; the caller then walks with os.Root. os.Root
// opens each component in turn, with about five syscalls per folder of
// the path: the spec's hundred links and libraries sit in a dozen folders.
func openFolder(rootFD int, rel string) (dirFD, error) {
	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		return dirFD(fd), nil
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
		return -1, errors.ErrUnsupported
	case errors.Is(err, unix.EXDEV):
		return -1, &fs.PathError{Op: "openat2", Path: rel, Err: errors.New("path escapes from the container root")}
	}
	return -1, &fs.PathError{Op: "openat2", Path: rel, Err: err}
}

// dirFD is a folder opened by openFolder. Every call takes one name of
// that folder and never follows a link in it.
type dirFD int

func (d dirFD) close() { unix.Close(int(d)) }

func checkName(op, name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return &fs.PathError{Op: op, Path: name, Err: errors.New("not a name in the folder")}
	}
	return nil
}

func (d dirFD) Lstat(name string) (fs.FileInfo, error) {
	if err := checkName("lstat", name); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(d), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	return statInfo{name: name, st: st}, nil
}

// mode returns the file type (S_IFMT bits) of name, not following a
// link, and the bare errno: no allocation.
func (d dirFD) mode(name string) (uint32, error) {
	if strings.Contains(name, "/") {
		return 0, unix.EINVAL
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(d), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, err
	}
	return st.Mode & unix.S_IFMT, nil
}

func (d dirFD) Readlink(name string) (string, error) {
	if err := checkName("readlink", name); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(int(d), name, buf)
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 { // PATH_MAX is 4096: longer is not a link
			return "", &fs.PathError{Op: "readlink", Path: name, Err: unix.ENAMETOOLONG}
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Remove removes a link or a file (never a folder: the hook removes only
// its own links).
func (d dirFD) Remove(name string) error {
	if err := checkName("remove", name); err != nil {
		return err
	}
	if err := unix.Unlinkat(int(d), name, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}

func (d dirFD) Symlink(oldname, newname string) error {
	if err := checkName("symlink", newname); err != nil {
		return err
	}
	if err := unix.Symlinkat(oldname, int(d), newname); err != nil {
		return &os.LinkError{Op: "symlink", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// Link gives oldname's file, never followed if it is a link, the second
// name newname in the folder.
func (d dirFD) Link(oldname, newname string) error {
	if err := checkName("link", oldname); err != nil {
		return err
	}
	if err := checkName("link", newname); err != nil {
		return err
	}
	if err := unix.Linkat(int(d), oldname, int(d), newname, 0); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// OpenFile opens name, never following a link there. The file is left
// blocking (O_NONBLOCK only keeps the open itself from waiting on a
// FIFO), so os.NewFile does not register it with the poller: five calls
// more for a file read or written once.
func (d dirFD) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if err := checkName("open", name); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(int(d), name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if flag&unix.O_NONBLOCK != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flag&^(unix.O_NONBLOCK|unix.O_CREAT|unix.O_EXCL|unix.O_TRUNC)); err != nil {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "fcntl", Path: name, Err: err}
		}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (d dirFD) Rename(oldname, newname string) error {
	if err := checkName("rename", oldname); err != nil {
		return err
	}
	if err := checkName("rename", newname); err != nil {
		return err
	}
	if err := unix.Renameat(int(d), oldname, int(d), newname); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// statInfo is the fs.FileInfo of an lstat through a dirFD.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s statInfo) Name() string       { return s.name }
func (s statInfo) Size() int64        { return s.st.Size }
func (s statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s statInfo) Sys() any           { return &s.st }
func (s statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFREG:
	default:
		m |= fs.ModeIrregular
	}
	if s.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
