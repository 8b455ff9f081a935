package hook

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// TestSetupSkipsAbsent: the spec lists every capability's links and every
// GPU's by-path links; the hook makes those whose target the container
// has, skips the others, and adds only the libraries that are there.
func TestSetupSkipsAbsent(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "libGLX_nvidia.so.580.65.06"), []byte("host file"), 0o644)
	args := []string{"setup",
		"--link", "libcuda.so.580.65.06::" + libDir + "/libcuda.so.1",
		"--link", "libGLX_nvidia.so.580.65.06::" + libDir + "/libGLX_nvidia.so.0",
		"--link", "libGLX_nvidia.so.0::" + libDir + "/libGLX_indirect.so.0",
		"--link", "../libnvidia-allocator.so.1::" + libDir + "/gbm/nvidia-drm_gbm.so",
		"--link", "../card1::/dev/dri/by-path/pci-0000:07:00.0-card",
		"--link", "../card2::/dev/dri/by-path/pci-0000:0f:00.0-card",
		"--library", libDir + "/libcuda.so.1",
		"--library", libDir + "/libGLX_nvidia.so.0",
		"--folder", libDir, "--folder", libDir + "/vdpau"}
	for _, tc := range []struct {
		name    string
		plant   func(root string)
		made    []string // links made
		skipped []string // links not made
		cached  []string // SONAMEs in the cache
		fails   bool
	}{
		{name: "compute only", made: []string{libDir + "/libcuda.so.1"},
			skipped: []string{libDir + "/libGLX_nvidia.so.0", libDir + "/libGLX_indirect.so.0", libDir + "/gbm/nvidia-drm_gbm.so", "/dev/dri/by-path/pci-0000:07:00.0-card"},
			cached:  []string{"libcuda.so.1"}},
		{name: "graphics and GPU 0's DRM nodes", plant: func(root string) {
			obj, err := fakehost.SharedObject("libGLX_nvidia.so.0")
			if err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(obj)
			os.WriteFile(filepath.Join(root, libDir, "libGLX_nvidia.so.580.65.06"), data, 0o644)
			os.MkdirAll(filepath.Join(root, "dev/dri"), 0o755)
			os.WriteFile(filepath.Join(root, "dev/dri/card1"), nil, 0o644) // a node as runc makes it; a file will do here
		}, made: []string{libDir + "/libcuda.so.1", libDir + "/libGLX_nvidia.so.0", libDir + "/libGLX_indirect.so.0", "/dev/dri/by-path/pci-0000:07:00.0-card"},
			skipped: []string{"/dev/dri/by-path/pci-0000:0f:00.0-card", libDir + "/gbm/nvidia-drm_gbm.so"},
			cached:  []string{"libcuda.so.1", "libGLX_nvidia.so.0"}},
		{name: "target is a FIFO", plant: func(root string) {
			syscall.Mkfifo(filepath.Join(root, libDir, "libGLX_nvidia.so.580.65.06"), 0o644)
		}, made: []string{libDir + "/libcuda.so.1"}, skipped: []string{libDir + "/libGLX_nvidia.so.0", libDir + "/libGLX_indirect.so.0"},
			cached: []string{"libcuda.so.1"}},
		{name: "target links out of the root", plant: func(root string) {
			os.Symlink(filepath.Join(outside, "libGLX_nvidia.so.580.65.06"), filepath.Join(root, libDir, "libGLX_nvidia.so.580.65.06"))
		}, fails: true},
		{name: "target links to /proc/self/root", plant: func(root string) {
			os.Symlink("/proc/self/root"+outside+"/libGLX_nvidia.so.580.65.06", filepath.Join(root, libDir, "libGLX_nvidia.so.580.65.06"))
		}, fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			if tc.plant != nil {
				tc.plant(root)
			}
			start := time.Now()
			code, stderr := runHook(t, b, args...)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			if (code != 0) != tc.fails {
				t.Fatalf("exit %d, stderr %q; want failure %v", code, stderr, tc.fails)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 1 {
				t.Errorf("files appeared outside the root: %v", entries)
			}
			if data, _ := os.ReadFile(filepath.Join(outside, "libGLX_nvidia.so.580.65.06")); string(data) != "host file" {
				t.Errorf("host file changed: %q", data)
			}
			if tc.fails {
				if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
					t.Errorf("error is more than one line: %q", stderr)
				}
				return
			}
			for _, l := range tc.made {
				if _, err := os.Lstat(filepath.Join(root, l)); err != nil {
					t.Errorf("link %s not made: %v", l, err)
				}
			}
			for _, l := range tc.skipped {
				if _, err := os.Lstat(filepath.Join(root, l)); err == nil {
					t.Errorf("link %s made; its target is not in the container", l)
				}
			}
			out, err := exec.Command(DefaultLdconfig, "-p", "-C", filepath.Join(root, "etc/ld.so.cache")).CombinedOutput()
			if err != nil {
				t.Fatalf("ldconfig -p: %v: %s", err, out)
			}
			if n := strings.Count(string(out), "=>"); n != len(tc.cached) {
				t.Errorf("cache has %d entries, want %v:\n%s", n, tc.cached, out)
			}
			for _, l := range tc.cached {
				if !strings.Contains(string(out), l+" (libc6,x86-64) => ") {
					t.Errorf("cache lacks %s:\n%s", l, out)
				}
			}
		})
	}
}
