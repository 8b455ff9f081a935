package readfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/internal/filekind"
)

// Regular returns the content of path, a regular file of at most limit
// bytes, for files that others control: another vendor's spec, a file
// under a driver root. Unlike Limited it never blocks and reads nothing
// but a regular file: a FIFO, a device node, a socket or a folder is a
// *NotRegularError at once (a device is not even opened), and a file whose
// size says it is over the bound is refused before it is read, so a 1 GiB
// sparse file costs a stat. Files of pseudo file systems (/proc, /sys),
// which say their size is 0, are read up to the bound. Errors are
// *fs.PathError values.
func Regular(path string, limit int64) ([]byte, error) {
	return regular(path, limit, 0)
}

// RegularNoFollow is Regular refusing a symbolic link at path itself (a
// *NotRegularError for fs.ModeSymlink): for a file of ours in a folder
// others may write.
func RegularNoFollow(path string, limit int64) ([]byte, error) {
	return regular(path, limit, unix.O_NOFOLLOW)
}

// Open opens path for reading when it is a regular file, with the checks
// of Regular but no bound on its size: for a file read in parts at
// offsets it names (an ELF library), where the caller bounds the reads.
// The error of a file that is not regular is a *NotRegularError.
func Open(path string) (*os.File, error) {
	f, _, err := open(path, 0, -1)
	return f, err
}

func regular(path string, limit int64, flags int) ([]byte, error) {
	f, size, err := open(path, flags, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// One allocation of the file's size, as os.ReadFile makes; a file
	// that grows while read is cut at the bound and refused.
	data := make([]byte, 0, min(size, limit)+1)
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if int64(len(data)) > limit {
			return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Limit: limit}}
		}
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}

// open opens a regular file of at most limit bytes (none: limit < 0)
// without blocking, and returns its size.
func open(path string, flags int, limit int64) (*os.File, int64, error) {
	fail := func(err error) (*os.File, int64, error) {
		return nil, 0, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	// Stat first, so that a device node is never opened (opening one
	// may do something), then fstat what was opened: the same check,
	// on the file read.
	var st unix.Stat_t
	stat := unix.Stat
	if flags&unix.O_NOFOLLOW != 0 {
		stat = unix.Lstat
	}
	if err := stat(path, &st); err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := fit(&st, limit); err != nil {
		return fail(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|flags, 0)
	if errors.Is(err, unix.ELOOP) && flags&unix.O_NOFOLLOW != 0 {
		return fail(&NotRegularError{Mode: fs.ModeSymlink})
	}
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return fail(err)
	}
	if err := fit(&st, limit); err != nil {
		f.Close()
		return fail(err)
	}
	return f, st.Size, nil
}

// fit refuses what is not a regular file, and a regular file whose size
// is over limit (none: limit < 0).
func fit(st *unix.Stat_t, limit int64) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &NotRegularError{Mode: fileMode(st.Mode)}
	}
	if limit >= 0 && st.Size > limit {
		return &TooLargeError{Limit: limit, Size: st.Size}
	}
	return nil
}

// fileMode is the fs.FileMode type bits of a stat mode.
func fileMode(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}

// NotRegularError is a file that is not a regular file, by its type.
type NotRegularError struct {
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s, not a regular file", filekind.Name(e.Mode))
}

// Head returns the first n bytes of path (fewer when it is shorter), a
// regular file checked as RegularNoFollow checks it, whatever its size:
// enough to tell a file's kind (an ELF program's magic) without reading
// it whole.
func Head(path string, n int64) ([]byte, error) {
	f, _, err := open(path, unix.O_NOFOLLOW, -1)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return data, nil
}
