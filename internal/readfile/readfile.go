// Package readfile reads a whole file a user named, as os.ReadFile does
// (a FIFO such as a shell's <(...) included), but no more than a bound: a
// path such as /dev/zero, or a huge file named by mistake, is then an
// error instead of a read that never ends or takes the host's memory.
// Regular and Head are the gate for files someone else controls (a
// driver root's, an image's): regular files only, never a wait.
package readfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Limited returns the content of path, an error if it holds more than
// limit bytes: an *fs.PathError whose Err is a *TooLargeError.
func Limited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return bounded(f, limit)
}

// TooLargeError is a file over the bound of the one asked for.
type TooLargeError struct {
	Limit int64 // bytes
}

func (e *TooLargeError) Error() string {
	size := fmt.Sprintf("%d bytes", e.Limit)
	if e.Limit >= 1<<20 && e.Limit%(1<<20) == 0 {
		size = fmt.Sprintf("%d MiB", e.Limit>>20)
	}
	return "more than " + size + ", too large for this file: check the path"
}

// Regular returns the content of path, a file someone else controls (a
// driver root's, an image's), as Limited does, but only when it is a
// regular file: opened without following a last link and without
// blocking, so a link, a FIFO, a device node or a folder in its place is
// an error at once, never a wait.
func Regular(path string, limit int64) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return bounded(f, limit)
}

// Head returns the first n bytes of path (fewer when it is shorter), a
// regular file as Regular checks it: enough to tell a file's kind (an ELF
// program's magic) without reading it whole.
func Head(path string, n int64) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// ErrNotRegular is what Regular and Head return, in an *fs.PathError, for
// a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

func openRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return f, nil
}

// bounded reads f to its end, an error when it holds more than limit bytes.
func bounded(f *os.File, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: f.Name(), Err: &TooLargeError{Limit: limit}}
	}
	return data, nil
}
