package hook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// TestAppProfile: with the driver's EGL library in the container, the hook
// writes an application profile whose EGLVisibleDGPUDevices has a bit per
// /dev/nvidiaN the container was given, and nothing without it.
func TestAppProfile(t *testing.T) {
	fakehost.RequireRoot(t, "the container's /dev needs real character devices (mknod)")
	egl := libDir + "/libEGL_nvidia.so.0"
	node := func(root, name string, minor uint32) {
		p := filepath.Join(root, "dev", name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, minor))); err != nil {
			t.Fatal(err)
		}
	}
	outside := t.TempDir()
	for _, tc := range []struct {
		name  string
		plant func(root string)
		want  string // the mask, "" for no profile
		fails bool
	}{
		{name: "no graphics", plant: func(root string) { node(root, "nvidia0", 0) }},
		{name: "GPUs 0 and 3", plant: func(root string) {
			os.WriteFile(filepath.Join(root, egl), []byte("lib"), 0o644)
			node(root, "nvidia0", 0)
			node(root, "nvidia3", 3)
			node(root, "nvidiactl", 255)
		}, want: "0x9"},
		{name: "a node named for one GPU opening another, and a file", plant: func(root string) {
			os.WriteFile(filepath.Join(root, egl), []byte("lib"), 0o644)
			node(root, "nvidia2", 2)
			node(root, "nvidia5", 1)
			os.WriteFile(filepath.Join(root, "dev/nvidia4"), nil, 0o644)
		}, want: "0x4"},
		{name: "the profile folder links out of the root", plant: func(root string) {
			os.WriteFile(filepath.Join(root, egl), []byte("lib"), 0o644)
			node(root, "nvidia0", 0)
			os.MkdirAll(filepath.Join(root, "etc"), 0o755)
			os.Symlink(outside, filepath.Join(root, "etc/nvidia"))
		}, fails: true},
		// /dev a FIFO (no runtime's /dev mounted over it): the hook must
		// not wait on it for a writer.
		{name: "/dev a FIFO", plant: func(root string) {
			os.WriteFile(filepath.Join(root, egl), []byte("lib"), 0o644)
			if err := unix.Mkfifo(filepath.Join(root, "dev"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			tc.plant(root)
			var code int
			var stderr string
			done := make(chan struct{})
			go func() {
				code, stderr = runHook(t, b, "setup", "--egl-library", egl, "--folder", libDir)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the hook still runs after 5s")
			}
			if (code != 0) != tc.fails {
				t.Fatalf("exit %d, stderr %q; want failure %v", code, stderr, tc.fails)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("files appeared outside the root: %v", entries)
			}
			data, err := os.ReadFile(filepath.Join(root, AppProfile))
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("a profile was written: %s", data)
			case tc.want != "" && err != nil:
				t.Errorf("no profile: %v", err)
			case tc.want != "" && !strings.Contains(string(data), `"EGLVisibleDGPUDevices", `+tc.want+`]`):
				t.Errorf("profile %s, want the mask %s", data, tc.want)
			}
		})
	}
}
