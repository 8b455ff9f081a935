package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// TestHostLayouts generates the spec of an h100 whose driver is laid out
// as real hosts lay it out (tests/fakehost/README.md), with `gpuctk cdi
// generate --driver-root`, and runs a container with GPU 0 through podman
// and through containerd: the driver as a prefix on a read-only file
// system of its own with wrapper scripts in /usr/bin (the H200 host of
// docs/hosts.md), and GKE's, whose libraries no linker
// cache lists, found through --library-search-path. Inside, nvidia-smi is
// the driver's ELF program at /usr/bin, a program linked against libcuda
// starts, the linker cache lists the driver's libraries where the host
// has them, and the GSP firmware is at /lib/firmware/nvidia/<version>.
func TestHostLayouts(t *testing.T) {
	fakehost.RequireRoot(t, "podman and containerd run rootful containers; the prefix is a mount of its own")
	p, err := inventory.LoadProfile("h100")
	if err != nil {
		t.Fatal(err)
	}
	libcuda, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "probe.c")
	if err := os.WriteFile(src, []byte(cudaProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(t.TempDir(), "cuda-probe")
	run(t, "gcc", "-o", probe, src, libcuda)
	image := func(t *testing.T) string {
		root := filepath.Join(t.TempDir(), "rootfs")
		if err := fakehost.Rootfs(root, fakehost.WithGlibc); err != nil {
			t.Fatal(err)
		}
		copyFile(t, probe, filepath.Join(root, "usr/bin/cuda-probe"), 0o755)
		return root
	}
	fw := "/lib/firmware/nvidia/" + p.DriverVersion
	script := "nvidia-smi -L; cuda-probe; /sbin/ldconfig -p | grep -E 'libcuda.so.1 |libnvidia-ml.so.1 '; ls " + fw

	for _, tc := range []struct {
		name  string
		build func(t *testing.T, root string)
		flags []string
		lib   string
	}{
		{"prefix on its own read-only file system", func(t *testing.T, root string) { fakehost.BuildPrefix(t, root, p) },
			nil, fakehost.Prefix + "/lib64"},
		{"GKE", func(t *testing.T, root string) {
			if err := fakehost.BuildGKE(root, p); err != nil {
				t.Fatal(err)
			}
		}, []string{"--library-search-path", fakehost.GKEPrefix + "/lib64"}, fakehost.GKEPrefix + "/lib64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			driverRoot := filepath.Join(t.TempDir(), "driver")
			tc.build(t, driverRoot)
			vendor := uniqueVendor()
			config := writeConfig(t, fmt.Sprintf("[cdi]\nvendor = %q\n\n[runtime]\nlog-file = %q\ncache-dir = %q\n",
				vendor, filepath.Join(t.TempDir(), "gpuctk-runtime.log"), filepath.Join(t.TempDir(), "cache")))
			run(t, bin("gpuctk"), append([]string{"cdi", "generate", "--simulate", "h100", "--driver-root", driverRoot,
				"--hook-path", bin("gpuctk-hook"), "--output", systemSpecPath(t, vendor), "--config", config}, tc.flags...)...)
			want := []string{
				"nvidia-smi: gpuctk fake driver program, args: -L",
				"gpuctk_fake_symbol=42",
				"libcuda.so.1 (libc6,x86-64) => " + tc.lib + "/libcuda.so.1",
				"libnvidia-ml.so.1 (libc6,x86-64) => " + tc.lib + "/libnvidia-ml.so.1",
				"gsp_ga10x.bin",
			}
			check := func(t *testing.T, out string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				got := lines(out)
				for _, w := range want {
					found := false
					for _, l := range got {
						found = found || strings.HasPrefix(l, w)
					}
					if !found {
						t.Errorf("inside the container: no line %q in\n%s", w, out)
					}
				}
			}
			t.Run("podman", func(t *testing.T) {
				out, err := podman(t, image(t), []string{"--device", vendor + "/gpu=0"}, script)
				check(t, out, err)
			})
			t.Run("containerd", func(t *testing.T) {
				c := newContainerd(t, `disabled_plugins = ["io.containerd.grpc.v1.cri"]`)
				c.start(t, "GPUCTK_CONFIG="+config)
				out, err := c.ctrRun(t, image(t), []string{"--device", vendor + "/gpu=0"}, script)
				check(t, out, err)
			})
		})
	}
}
