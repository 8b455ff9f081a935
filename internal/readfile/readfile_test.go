package readfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestLimited(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int64) string { return sparse(t, dir, name, size) }
	fifo := mkfifo(t, dir, "fifo")
	go func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.WriteString("from a pipe")
			f.Close()
		}
	}()
	for _, tc := range []struct {
		name, path string
		size       int // of the content read, -1 for an error
		err        string
	}{
		{"at the bound", write("full", 1<<20), 1 << 20, ""},
		{"empty", write("empty", 0), 0, ""},
		{"one byte over", write("over", 1<<20+1), -1, "read " + filepath.Join(dir, "over") + ": more than 1 MiB, too large for this file: check the path"},
		{"endless device", "/dev/zero", -1, "read /dev/zero: more than 1 MiB, too large for this file: check the path"},
		{"a FIFO is read to its end", fifo, len("from a pipe"), ""},
		{"missing", filepath.Join(dir, "none"), -1, "open " + filepath.Join(dir, "none") + ": no such file or directory"},
		{"a folder", dir, -1, "read " + dir + ": is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Limited(tc.path, 1<<20)
			if tc.size < 0 {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(data) != tc.size {
				t.Fatalf("got %d bytes, %v; want %d", len(data), err, tc.size)
			}
		})
	}
	var tl *TooLargeError
	if _, err := Limited("/dev/zero", 100); !errors.As(err, &tl) || tl.Limit != 100 || tl.Error() != "more than 100 bytes, too large for this file: check the path" {
		t.Errorf("small bound: %v", err)
	}
}

// sparse makes a file of size bytes, none written.
func sparse(t *testing.T, dir, name string, size int64) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkfifo(t *testing.T, dir, name string) string {
	p := filepath.Join(dir, name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
