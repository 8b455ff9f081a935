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
	write := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
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

// TestRegular: Regular and Head read regular files only, and what is not
// one (a link, a FIFO no one writes to, a device, a folder) is refused at
// once, never waited on.
func TestRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("\x7fELF and more"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		limit      int64
		regular    string // Regular's content, or its error
		head       string // Head's 4 bytes, or its error
	}{
		{"a regular file", file, 64, "\x7fELF and more", "\x7fELF"},
		{"over the bound", file, 4, "read " + file + ": more than 4 bytes, too large for this file: check the path", "\x7fELF"},
		{"a link", link, 64, "open " + link + ": too many levels of symbolic links", "open " + link + ": too many levels of symbolic links"},
		{"a FIFO", fifo, 64, "open " + fifo + ": not a regular file", "open " + fifo + ": not a regular file"},
		{"a device", "/dev/zero", 64, "open /dev/zero: not a regular file", "open /dev/zero: not a regular file"},
		{"a folder", dir, 64, "open " + dir + ": not a regular file", "open " + dir + ": not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := func(data []byte, err error) string {
				if err != nil {
					return err.Error()
				}
				return string(data)
			}
			if got := text(Regular(tc.path, tc.limit)); got != tc.regular {
				t.Errorf("Regular: %q, want %q", got, tc.regular)
			}
			if got := text(Head(tc.path, 4)); got != tc.head {
				t.Errorf("Head: %q, want %q", got, tc.head)
			}
		})
	}
	if _, err := Regular(fifo, 64); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a FIFO: %v, want ErrNotRegular", err)
	}
}
