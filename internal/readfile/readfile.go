// Package readfile is the one bounded reader of whole files. Limited reads
// a file a user named, as os.ReadFile does (a FIFO such as a shell's
// <(...) included), but no more than a bound: a path such as /dev/zero,
// or a huge file named by mistake, is then an error instead of a read
// that never ends or takes the host's memory. Regular is the gate for
// files that others control (other vendors' CDI specs, files under a
// driver root): regular files only, opened without blocking, size-capped.
package readfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
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
	// Size is the size the file's metadata gave, where that was over
	// Limit; 0 for a file found too large by reading it.
	Size int64
}

func (e *TooLargeError) Error() string {
	size := fmt.Sprintf("%d bytes", e.Limit)
	if e.Limit >= 1<<20 && e.Limit%(1<<20) == 0 {
		size = fmt.Sprintf("%d MiB", e.Limit>>20)
	}
	return "more than " + size + ", too large for this file: check the path"
}
