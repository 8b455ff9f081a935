// Package fakehost builds fake driver roots for tests: the files a host
// with the NVIDIA driver has, for a simulated host profile, in a temporary
// folder. Device nodes are real character devices (mknod, so tests need
// root) with the majors and minors a real driver uses; libraries are real
// ELF shared objects with the driver's SONAMEs, built with gcc; the linker
// cache is written by the real ldconfig. Rootfs builds the other side: a
// container's root file system, from busybox alone to glibc with its own
// linker cache and a copy of the host's libraries.
package fakehost

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/inventory"
)

// LibDir is where the fake root installs the driver's libraries.
const LibDir = "/usr/lib/x86_64-linux-gnu"

// Libraries are the driver libraries a fake root holds, by SONAME; the
// file of each is <base>.so.<driver version>.
var Libraries = map[string]string{
	"libcuda":                  "libcuda.so.1",
	"libnvidia-ml":             "libnvidia-ml.so.1",
	"libnvidia-ptxjitcompiler": "libnvidia-ptxjitcompiler.so.1",
	"libnvidia-nvvm":           "libnvidia-nvvm.so.4",
}

// Binaries are the driver programs a fake root holds.
var Binaries = []string{"nvidia-smi", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // soname -> built object
)

// objectSource is the C source of every fake library; objectVersion names
// the build, so a change to either builds the objects again.
const (
	objectSource  = "int gpuctk_fake_symbol(void) { return 42; }\n"
	objectVersion = "v1"
)

// programSource is the C source of every fake driver program: a static
// ELF that says which program it stands for, so a test sees from the
// output that the driver's program ran (not a wrapper script, nor the
// image's own).
const programSource = `#include <stdio.h>
int main(int argc, char **argv) {
	printf("%s: gpuctk fake driver program, args:", NAME);
	for (int i = 1; i < argc; i++) printf(" %s", argv[i]);
	printf("\n");
	return 0;
}
`

// SharedObject returns the path of an ELF shared object with the given
// SONAME, built with gcc once and kept in the module's .cache/fakehost
// (the user's cache folder outside a checkout): a folder per process
// under /tmp was left behind by every test binary and fuzz worker.
func SharedObject(soname string) (string, error) {
	return buildOnce(soname, objectSource, "-shared", "-fPIC", "-Wl,-soname,"+soname)
}

// Program returns the path of a static ELF program standing for the
// driver's program name (nvidia-smi): it prints
// "NAME: gpuctk fake driver program, args: ARGS". Built as SharedObject is.
func Program(name string) (string, error) {
	return buildOnce("program-"+name, programSource, "-static", "-Os", "-s", fmt.Sprintf("-DNAME=%q", name))
}

// buildOnce builds src with gcc and args into a file named for name in
// objectDir, once.
func buildOnce(name, src string, args ...string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p, nil
	}
	dir, err := objectDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name+"."+objectVersion)
	if _, err := os.Stat(out); err == nil {
		built[name] = out
		return out, nil
	}
	// Built under a unique name and renamed: test binaries of several
	// packages build the same object at once.
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	c, obj := filepath.Join(tmp, "fake.c"), filepath.Join(tmp, name)
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		return "", err
	}
	if b, err := exec.Command("gcc", append(args, "-o", obj, c)...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc (needed to build fake driver files): %v: %s", err, b)
	}
	if err := os.Rename(obj, out); err != nil {
		return "", err
	}
	built[name] = out
	return out, nil
}

// objectDir is .cache/fakehost in the checkout the tests run from (found
// from the working folder up), else gpuctk-fakehost in the user's cache.
func objectDir() (string, error) {
	dir := ""
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.HasPrefix(data, []byte("module github.com/gpuctk/gpuctk\n")) {
				dir = filepath.Join(d, ".cache", "fakehost")
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no folder to keep fake libraries in: %w", err)
		}
		dir = filepath.Join(c, "gpuctk-fakehost")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("fake libraries: %w", err)
	}
	return dir, nil
}

// installObject writes a shared object with the given SONAME at dst.
func installObject(soname, dst string) error {
	obj, err := SharedObject(soname)
	if err != nil {
		return err
	}
	return install(obj, dst)
}

// installProgram writes the fake driver program name at dst.
func installProgram(name, dst string) error {
	prog, err := Program(name)
	if err != nil {
		return err
	}
	return install(prog, dst)
}

// install copies a built file to dst, executable.
func install(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

// Build fills root with the driver files and device nodes of the host a
// profile describes: control nodes, /dev/nvidiaN per GPU, MIG capability
// nodes and /proc/driver/nvidia-caps/mig-minors, the libraries with their
// SONAME links and an /etc/ld.so.cache from ldconfig, the programs (static
// ELF stand-ins, see Program) and the GSP firmware.
func Build(root string, p *inventory.Profile) error {
	nv := func(minor int) int { return int(unix.Mkdev(195, uint32(minor))) }
	nodes := map[string]int{
		"/dev/nvidiactl":        nv(255),
		"/dev/nvidia-modeset":   nv(254),
		"/dev/nvidia-uvm":       int(unix.Mkdev(uint32(p.UVMMajor), 0)),
		"/dev/nvidia-uvm-tools": int(unix.Mkdev(uint32(p.UVMMajor), 1)),
	}
	migMinors := "config 1\nmonitor 2\n"
	for _, g := range p.GPUs {
		nodes[fmt.Sprintf("/dev/nvidia%d", g.Minor)] = nv(g.Minor)
		for _, m := range g.MIG {
			gi := 3 + g.Minor*135 + m.GI*9
			ci := gi + 1 + m.CI
			migMinors += fmt.Sprintf("gpu%d/gi%d/access %d\ngpu%d/gi%d/ci%d/access %d\n", g.Minor, m.GI, gi, g.Minor, m.GI, m.CI, ci)
			for _, minor := range []int{gi, ci} {
				nodes[fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor)] = int(unix.Mkdev(uint32(p.CapsMajor), uint32(minor)))
			}
		}
	}
	for path, dev := range nodes {
		hp := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			return err
		}
		os.Remove(hp)
		if err := unix.Mknod(hp, unix.S_IFCHR|0o666, dev); err != nil {
			return fmt.Errorf("mknod %s (tests need root): %w", hp, err)
		}
	}
	files := map[string]string{
		"/proc/driver/nvidia-caps/mig-minors":                        migMinors,
		"/etc/ld.so.conf":                                            "include /etc/ld.so.conf.d/*.conf\n",
		"/etc/ld.so.conf.d/x86_64-linux-gnu.conf":                    LibDir + "\n",
		"/lib/firmware/nvidia/" + p.DriverVersion + "/gsp_ga10x.bin": "firmware",
	}
	for path, content := range files {
		hp := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(hp, []byte(content), 0o755); err != nil {
			return err
		}
	}
	for base, soname := range Libraries {
		if err := installObject(soname, filepath.Join(root, LibDir, base+".so."+p.DriverVersion)); err != nil {
			return err
		}
	}
	for _, b := range Binaries {
		if err := installProgram(b, filepath.Join(root, "/usr/bin", b)); err != nil {
			return err
		}
	}
	// ldconfig makes the SONAME links and the cache, as on a real host.
	if b, err := exec.Command("ldconfig", "-r", root).CombinedOutput(); err != nil {
		return fmt.Errorf("ldconfig -r %s: %v: %s", root, err, b)
	}
	return nil
}

// Host returns the host of an embedded profile, failing the test when it
// does not load.
func Host(t testing.TB, profile string) *inventory.Host {
	t.Helper()
	p, err := inventory.LoadProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Host()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// RequireRoot skips a test that needs root when it runs as another user,
// saying why, so that an unprivileged `go test ./...` stays a quick loop.
// Under CI (CI=true, which runs as root) it fails instead: there a
// root-only test must run, never pass by skipping.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs root (%s), and CI must run it: run as root", why)
	}
	t.Skipf("needs root (%s): run it as root, as `make test` does", why)
}
