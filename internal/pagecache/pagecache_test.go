package pagecache

import (
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// resident opens path and returns Resident's counts.
func resident(t *testing.T, path string) (int, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	in, all, err := Resident(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return in, all
}

func TestWarm(t *testing.T) {
	path := filepath.Join(t.TempDir(), "program")
	data := make([]byte, 4<<20)
	rand.Read(data)
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Drop(path); err != nil {
		t.Fatal(err)
	}
	in, all := resident(t, path)
	if all != len(data)/os.Getpagesize() {
		t.Fatalf("Resident counts %d pages in a %d-byte file", all, len(data))
	}
	if in == all {
		t.Skipf("the file system of %s keeps a file's pages in memory (tmpfs?): nothing to bring in", filepath.Dir(path))
	}
	if err := Warm(path); err != nil {
		t.Fatal(err)
	}
	if in, all := resident(t, path); in != all {
		t.Errorf("after Warm, %d of %d pages are in the page cache", in, all)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != string(data) {
		t.Errorf("the file changed under Warm (%v)", err)
	}
}

// TestWarmBadFiles: what is not a program's file is refused at once, or
// left alone when too large.
func TestWarmBadFiles(t *testing.T) {
	dir := t.TempDir()
	if err := Warm(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Warm of a missing file: %v, want not exist", err)
	}
	if err := Warm(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Warm of a folder: %v, want not a regular file", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Warm(fifo) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Warm of a FIFO: %v, want not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Warm of a FIFO blocked")
	}
	// A sparse file past the limit is not read: none of it comes in.
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, maxSize+1); err != nil {
		t.Fatal(err)
	}
	if err := Warm(big); err != nil {
		t.Fatal(err)
	}
	if in, _ := resident(t, big); in != 0 {
		t.Errorf("Warm read %d pages of a file over its limit", in)
	}
}

// TestEvictDirty: found measuring the hook. A program just built is in
// the page cache as the linker wrote it, in pages still being written
// back, which fadvise does not drop: Warm then read back what was there,
// and every run of the program mapped the linker's small pieces (0.1 ms
// more per hook run in the bench than after a read through; an rpm
// upgrade, which does not sync what it installs, leaves the same). The
// pages are written back before they are dropped. The program is linked
// here by the Go toolchain, as `make build` links the hook.
func TestEvictDirty(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"go.mod": "module program\n", "main.go": "package main\n\nfunc main() {}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "program")
	build := exec.Command("go", "build", "-o", path, ".")
	build.Dir, build.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := os.Open(path) // read-only, as Warm opens it
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := evict(f); err != nil {
		t.Fatal(err)
	}
	if in, all := resident(t, path); in == all && filesystemKeepsPages(t, dir) {
		t.Skipf("the file system of %s keeps a file's pages in memory (tmpfs?): nothing to drop", dir)
	} else if in != 0 {
		t.Errorf("%d of %d pages of a program just linked are still in the page cache after evict", in, all)
	}
}

// filesystemKeepsPages reports whether dir is on tmpfs or ramfs.
func filesystemKeepsPages(t *testing.T, dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}
