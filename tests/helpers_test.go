package tests

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// busyboxRoot returns a root file system holding busybox and, when
// withLdconfig, the host's static ldconfig so `ldconfig -p` runs inside.
func busyboxRoot(t testing.TB, withLdconfig bool) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "sbin", "etc", "dev", "proc", "sys", "tmp", "usr/lib/x86_64-linux-gnu"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"), 0o755)
	for _, l := range []string{"sh", "ls", "cat", "env", "readlink", "grep", "stat", "test", "mount", "sleep", "echo"} {
		os.Symlink("busybox", filepath.Join(root, "bin", l))
	}
	if withLdconfig {
		copyFile(t, "/sbin/ldconfig", filepath.Join(root, "sbin/ldconfig"), 0o755)
	}
	return root
}

func copyFile(t testing.TB, src, dst string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("%v (make test installs busybox-static)", err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
}

// fakeDriverRoot builds a driver root (and dev root) for a profile.
func fakeDriverRoot(t testing.TB, profile string) (string, *inventory.Profile) {
	t.Helper()
	p, err := inventory.LoadProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "driver")
	if err := fakehost.Build(root, p); err != nil {
		t.Fatal(err)
	}
	return root, p
}

// uniqueVendor returns a CDI vendor no other spec on the host uses, so
// tests can write to the system spec dirs podman reads without clashing
// with a real nvidia.com spec or with each other.
func uniqueVendor() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "gpuctk-e2e-" + hex.EncodeToString(b) + ".example.com"
}

// systemSpecPath returns a spec path in /var/run/cdi, removed after the test.
func systemSpecPath(t testing.TB, vendor string) string {
	t.Helper()
	os.MkdirAll("/var/run/cdi", 0o755)
	p := filepath.Join("/var/run/cdi", vendor+".yaml")
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// podmanArgs are what podman needs on the test machines (Debian 12 VMs,
// where crun fails on hybrid cgroups and the hard NOFILE limit is below
// podman's default): runc, cgroupfs, no network, explicit rlimits.
var podmanArgs = []string{"--runtime", "runc", "--cgroup-manager=cgroupfs", "run", "--rm", "--network=none",
	"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// podman runs a container from rootfs with extra run flags and a shell
// script, returning its combined output and error.
func podman(t testing.TB, rootfs string, flags []string, script string) (string, error) {
	t.Helper()
	args := append(append(append([]string{}, podmanArgs...), flags...), "--rootfs", rootfs, "/bin/sh", "-c", script)
	out, err := exec.Command("podman", args...).CombinedOutput()
	return string(out), err
}

// lines returns the non-empty lines of s, trimmed.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
