package mps

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpuctk/gpuctk/offer"
)

// TestLinkDriverLibs: a daemon under a driver root other than / loads the
// driver's libraries from a folder of links to them alone: never the
// driver root's glibc, which does not match the loader the daemon runs
// with. Links are followed inside the root (Debian's go through
// /etc/alternatives), and a second start replaces the folder whole.
func TestLinkDriverLibs(t *testing.T) {
	root := t.TempDir()
	write := func(p, data string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	const lib = "usr/lib/x86_64-linux-gnu"
	write(lib+"/libc.so.6", "the driver root's glibc")
	write("lib64/ld-linux-x86-64.so.2", "the driver root's loader")
	write(lib+"/libpthread.so.0", "glibc")
	write(lib+"/libcuda.so.580.65.06", "cuda")
	link("libcuda.so.580.65.06", lib+"/libcuda.so.1")
	// Debian: the SONAME through /etc/alternatives, absolute links.
	write(lib+"/nvidia/current/libnvidia-ml.so.580.65.06", "nvml")
	link("/etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu", lib+"/libnvidia-ml.so.1")
	link("/"+lib+"/nvidia/current/libnvidia-ml.so.580.65.06", "etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu")
	link("/nonexistent/libnvidia-cfg.so.1", lib+"/libnvidia-cfg.so.1") // broken: left out

	d := &offer.Share{Dir: t.TempDir()}
	m := New(WithDriverRoot(root))
	for range 2 {
		if err := m.linkDriverLibs(d); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(d.Dir, "driver-lib")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"libcuda.so.1", "libcuda.so.580.65.06", "libnvidia-ml.so.1", "libnvidia-ml.so.580.65.06"}
	if !slices.Equal(names, want) {
		t.Errorf("driver library folder holds %q, want %q (the driver's libraries, no glibc)", names, want)
	}
	for name, data := range map[string]string{"libcuda.so.1": "cuda", "libnvidia-ml.so.1": "nvml"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != data {
			t.Errorf("%s in the folder reads %q (%v), want the driver root's %q", name, got, err, data)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(d.Dir, ".driver-lib-*")); len(left) != 0 {
		t.Errorf("left behind %q", left)
	}
}
