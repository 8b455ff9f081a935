package readfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// TestRegular: a FIFO with no writer, a device or a folder is refused at
// once; a regular file, through a link too, is read within the bound.
func TestRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(file, []byte("a = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("config.toml", link); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 1<<30); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want, err string }{
		{file, "a = 1\n", ""},
		{link, "a = 1\n", ""},
		{fifo, "", "read " + fifo + ": it is a FIFO, not a regular file: put a regular file there"},
		{"/dev/zero", "", "read /dev/zero: it is a character device, not a regular file: put a regular file there"},
		{dir, "", "read " + dir + ": it is a folder, not a regular file: put a regular file there"},
		{big, "", "read " + big + ": more than 1 MiB, too large for this file: check the path"},
	} {
		data, err := Regular(tc.path, 1<<20)
		if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) || string(data) != tc.want {
			t.Errorf("Regular(%s) = %q, %v; want %q, %q", tc.path, data, err, tc.want, tc.err)
		}
		var nr *NotRegularError
		if strings.Contains(tc.err, "not a regular") && !errors.As(err, &nr) {
			t.Errorf("Regular(%s): %v is no *NotRegularError", tc.path, err)
		}
	}
}
