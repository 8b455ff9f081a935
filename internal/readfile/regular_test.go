package readfile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestRegular(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, size int64) string { return sparse(t, dir, name, size) }
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := mkfifo(t, dir, "fifo.yaml")
	sock := filepath.Join(dir, "sock.yaml")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	small := file("small.yaml", 10)
	notRegular := func(kind string) string { return kind + ", not a regular file" }
	tooLarge := "more than 1 MiB, too large for this file: check the path"
	for _, tc := range []struct {
		name, path string
		nofollow   bool
		size       int // of the content read, -1 for an error
		err        string
	}{
		{"at the bound", file("full", 1<<20), false, 1 << 20, ""},
		{"empty", file("empty", 0), false, 0, ""},
		{"one byte over", file("over", 1<<20+1), false, -1, tooLarge},
		{"1 GiB sparse, refused by its size", file("sparse.yaml", 1<<30), false, -1, tooLarge},
		{"FIFO, without a writer", fifo, false, -1, notRegular("a FIFO")},
		{"endless device", "/dev/zero", false, -1, notRegular("a character device")},
		{"link to an endless device", link("zero.yaml", "/dev/zero"), false, -1, notRegular("a character device")},
		{"link to a FIFO", link("tofifo.yaml", fifo), false, -1, notRegular("a FIFO")},
		{"socket", sock, false, -1, notRegular("a socket")},
		{"folder", dir, false, -1, notRegular("a folder")},
		{"link followed", link("tosmall.yaml", small), false, 10, ""},
		{"link not followed", filepath.Join(dir, "tosmall.yaml"), true, -1, notRegular("a symbolic link")},
		{"regular, not following", small, true, 10, ""},
		{"pseudo file of size 0 read to its end", "/proc/self/status", false, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := Regular
			if tc.nofollow {
				read = RegularNoFollow
			}
			start := time.Now()
			data, err := read(tc.path, 1<<20)
			if d := time.Since(start); d > time.Second {
				t.Errorf("took %v", d)
			}
			if tc.size < 0 {
				var pe *fs.PathError
				if !errors.As(err, &pe) || pe.Path != tc.path || pe.Err.Error() != tc.err {
					t.Fatalf("err = %v, want %s: %s", err, tc.path, tc.err)
				}
				return
			}
			if err != nil || len(data) < tc.size || tc.size != 1 && len(data) != tc.size {
				t.Fatalf("got %d bytes, %v; want %d", len(data), err, tc.size)
			}
		})
	}
	var nr *NotRegularError
	if _, err := Regular(fifo, 10); !errors.As(err, &nr) || nr.Mode&fs.ModeNamedPipe == 0 {
		t.Errorf("FIFO: %v, want a *NotRegularError", err)
	}
	if _, err := Regular(filepath.Join(dir, "none"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v, want fs.ErrNotExist", err)
	}
}

// TestHead: Head reads the first bytes of a regular file, refuses a link
// at the path, a FIFO and a device at once, and ignores the size bound.
func TestHead(t *testing.T) {
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
	if got, err := Head(file, 4); err != nil || string(got) != "\x7fELF" {
		t.Errorf("Head(file) = %q, %v; want the ELF magic", got, err)
	}
	for _, p := range []string{link, fifo, "/dev/zero", dir} {
		var nr *NotRegularError
		if _, err := Head(p, 4); !errors.As(err, &nr) {
			t.Errorf("Head(%s) = %v, want a *NotRegularError", p, err)
		}
	}
}
