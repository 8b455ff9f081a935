package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// TestPodmanCUDACompat runs a CUDA image carrying the cuda-compat package
// of a newer driver branch (590) on a 580 host of data-center GPUs: inside,
// the loader finds the compat libcuda.so.1 first, unless the
// configuration turns forward compatibility off.
func TestPodmanCUDACompat(t *testing.T) {
	fakehost.RequireRoot(t, "podman runs rootful containers")
	driverRoot, _ := fakeDriverRoot(t, "l40s")
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := fakehost.Rootfs(rootfs, fakehost.WithGlibc); err != nil {
		t.Fatal(err)
	}
	obj, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(obj)
	compat := filepath.Join(rootfs, "usr/local/cuda-13.0/compat")
	os.MkdirAll(compat, 0o755)
	os.WriteFile(filepath.Join(compat, "libcuda.so.590.12.01"), data, 0o755)
	os.Symlink("libcuda.so.590.12.01", filepath.Join(compat, "libcuda.so.1"))
	os.Symlink("/usr/local/cuda-13.0", filepath.Join(rootfs, "usr/local/cuda"))

	for _, tc := range []struct {
		name, config, first string
	}{
		{"on", "", "/usr/local/cuda/compat/libcuda.so.1"},
		{"cuda-compat = false", "[cdi]\ncuda-compat = false\n", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vendor := uniqueVendor()
			spec := systemSpecPath(t, vendor)
			run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "l40s", "--driver-root", driverRoot,
				"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", writeConfig(t, tc.config))
			out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=0"}, "/sbin/ldconfig -p | grep 'libcuda.so.1 '")
			if err != nil {
				t.Fatalf("podman: %v\n%s", err, out)
			}
			l := lines(out)
			if len(l) == 0 || !strings.HasSuffix(l[0], "=> "+tc.first) {
				t.Errorf("inside, libcuda.so.1 resolves first to %v, want %s", l, tc.first)
			}
		})
	}
}
