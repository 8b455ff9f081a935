// Package readfile reads a whole file a user named, as os.ReadFile does
// (a FIFO such as a shell's <(...) included), but no more than a bound: a
// path such as /dev/zero, or a huge file named by mistake, is then an
// error instead of a read that never ends or takes the host's memory.
package readfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/gpuctk/gpuctk/internal/filekind"
)

// Limited returns the content of path, an error if it holds more than
// limit bytes: an *fs.PathError whose Err is a *TooLargeError.
func Limited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Limit: limit}}
	}
	return data, nil
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

// Regular is Limited for a file someone else controls, such as a config
// swapped in under a daemon: it is opened without blocking (a FIFO there
// must not hang the caller) and read only if it is a regular file once
// open; anything else is an *fs.PathError whose Err is a
// *NotRegularError. Links are followed: a ConfigMap's file is one.
func Regular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &NotRegularError{Kind: filekind.Name(fi.Mode())}}
	}
	if fi.Size() > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Limit: limit}}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Limit: limit}}
	}
	return data, nil
}

// NotRegularError is a file that is not a regular file.
type NotRegularError struct {
	Kind string // filekind.Name's: "a FIFO"
}

func (e *NotRegularError) Error() string {
	return "it is " + e.Kind + ", not a regular file: put a regular file there"
}
