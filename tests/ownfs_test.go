package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// smiSrc stands in for nvidia-smi: an ELF program.
const smiSrc = `#include <stdio.h>
int main(void) { printf("SMI-ELF\n"); return 0; }
`

// TestDriverOnItsOwnFileSystem: a host laid out as the GPU host of
// docs/hosts.md, the driver in /usr/local/nvidia on a
// read-only file system of its own (a tmpfs remounted read-only, as a
// squashfs is), where no hard link into the driver folder can be made.
// The spec mounts the prefix whole, in as few mounts as the driver folder
// takes on one file system, and a container finds the driver's libraries
// in its linker cache and runs its program.
func TestDriverOnItsOwnFileSystem(t *testing.T) {
	fakehost.RequireRoot(t, "mounts a tmpfs, podman runs rootful containers")
	vendor, rootfs := ownFSSpec(t)
	got, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=0"}, ownFSScript)
	if err != nil {
		t.Fatalf("podman: %v\n%s", err, got)
	}
	t.Logf("inside:\n%s", got)
	checkOwnFS(t, got)
}

// ownFSScript runs the driver's program, a program linked with libcuda,
// and lists the linker cache's driver libraries.
const ownFSScript = `for p in /usr/bin/nvidia-smi /usr/local/nvidia/bin/nvidia-smi; do [ -e $p ] && $p && break; done; /bin/usecuda; ` +
	`ldconfig -p | grep -E 'lib(cuda|nvidia-ml)\.so\.1 '`

// checkOwnFS checks what ownFSScript printed in the container.
func checkOwnFS(t *testing.T, got string) {
	t.Helper()
	for _, want := range []string{
		"SMI-ELF", "LIBCALL=42",
		"libcuda.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so.1",
		"libnvidia-ml.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libnvidia-ml.so.1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("inside, no %q", want)
		}
	}
}

// ownFSSpec lays the host out, writes the spec of vendor in
// /var/run/cdi and checks its mounts, and returns the vendor and a glibc
// image's root file system with a program linked with libcuda.
func ownFSSpec(t *testing.T) (string, string) {
	t.Helper()
	root, p := fakeDriverRoot(t, "l40s")
	v := p.DriverVersion
	// The driver's files move from the distribution's folders to the
	// prefix: its own file system, listed in the linker's configuration.
	for base := range fakehost.Libraries {
		matches, _ := filepath.Glob(filepath.Join(root, fakehost.LibDir, base+".so*"))
		for _, m := range matches {
			os.Remove(m)
		}
	}
	for _, b := range fakehost.Binaries {
		os.Remove(filepath.Join(root, "usr/bin", b))
	}
	prefix := filepath.Join(root, "usr/local/nvidia")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", prefix, "tmpfs", 0, "size=32m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(prefix, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", prefix, err)
		}
	})
	for _, d := range []string{"lib64", "bin"} {
		if err := os.MkdirAll(filepath.Join(prefix, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for base, soname := range fakehost.Libraries {
		obj, err := fakehost.SharedObject(soname)
		if err != nil {
			t.Fatal(err)
		}
		copyFile(t, obj, filepath.Join(prefix, "lib64", base+".so."+v), 0o755)
	}
	gccBuild(t, filepath.Join(prefix, "bin"), "nvidia-smi", smiSrc, "-static")
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf.d/nvidia.conf"), []byte("/usr/local/nvidia/lib64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ldconfig", "-r", root).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig -r %s: %v: %s", root, err, out)
	}
	if err := unix.Mount("", prefix, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}

	vendor := uniqueVendor()
	spec := systemSpecPath(t, vendor)
	store := t.TempDir()
	config := writeConfig(t, "[cdi]\ndriver-store = \""+store+"\"\n")
	out := run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "l40s", "--driver-root", root,
		"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", config)
	if strings.Contains(out, "one by one") {
		t.Errorf("generate: %s", out)
	}
	data, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	// The prefix mounted whole, the firmware's folder where the host has
	// it: two mounts, as the driver folder's core and firmware on one
	// file system; nothing copied.
	for _, want := range []string{
		`hostPath: "` + prefix + `"`, `containerPath: "/usr/lib/gpuctk/core"`,
		`hostPath: "` + filepath.Join(root, "lib/firmware/nvidia", v) + `"`,
		"/usr/lib/gpuctk/core/bin/nvidia-smi::",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the spec has no %s:\n%s", want, data)
		}
	}
	if n := strings.Count(string(data), "containerPath:"); n != 2 {
		t.Errorf("the spec has %d mounts, want 2 (the prefix, the firmware's folder):\n%s", n, data)
	}
	if left, _ := os.ReadDir(store); len(left) > 0 {
		t.Errorf("the store holds %d entries, want none", len(left))
	}

	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := fakehost.Rootfs(rootfs, fakehost.WithGlibc); err != nil {
		t.Fatal(err)
	}
	cuda, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	gccBuild(t, filepath.Join(rootfs, "bin"), "usecuda", usecudaSrc, cuda)
	return vendor, rootfs
}
