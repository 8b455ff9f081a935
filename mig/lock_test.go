package mig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLock: a second apply is refused, naming the holder and the file,
// until the first lets go; what a holder left behind (its pid, a crash's
// file) does not lock anyone out; a file that is not a plain one is
// refused without hanging.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "gpuctk", "mig.lock")
	release, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(path)
	want := fmt.Sprintf("another gpuctk mig apply (pid %d) is changing the MIG layout (it holds %s): nothing was changed; run apply again once it has finished", os.Getpid(), path)
	if err == nil || err.Error() != want {
		t.Fatalf("second lock: %v, want %q", err, want)
	}
	release()
	release, err = Lock(path)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	release()

	// A holder that died left its pid: the flock went with it.
	if err := os.WriteFile(path, []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	release, err = Lock(path)
	if err != nil {
		t.Fatalf("stale file: %v", err)
	}
	release()
	if data, _ := os.ReadFile(path); string(data) != fmt.Sprintf("%d\n", os.Getpid()) {
		t.Errorf("lock file holds %q, want this pid", data)
	}

	for _, tc := range []struct {
		name, want string
		make       func(string) error
	}{
		{"fifo", "not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"folder", "not a regular file", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"symlink", "not a regular file", func(p string) error { return os.Symlink(path, p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "mig.lock")
			if err := tc.make(p); err != nil {
				t.Fatal(err)
			}
			release, err := Lock(p)
			if err == nil {
				release()
				t.Fatal("locked")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("got %v, want %q naming %s", err, tc.want, p)
			}
		})
	}
}
