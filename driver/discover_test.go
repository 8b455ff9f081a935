package driver

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

func fakeRoot(t *testing.T, profile string) (string, *inventory.Profile) {
	t.Helper()
	fakehost.RequireRoot(t, "a fake driver root has real device nodes (mknod)")
	p, err := inventory.LoadProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := fakehost.Build(root, p); err != nil {
		t.Fatal(err)
	}
	return root, p
}

func TestDiscover(t *testing.T) {
	root, p := fakeRoot(t, "h100")
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	lib := "/usr/lib/x86_64-linux-gnu/"
	wantLinks := []string{
		"libcuda.so.580.65.06::" + lib + "libcuda.so.1",
		"libcuda.so.1::" + lib + "libcuda.so",
		"libnvidia-ml.so.580.65.06::" + lib + "libnvidia-ml.so.1",
		"libnvidia-ml.so.1::" + lib + "libnvidia-ml.so",
		"libnvidia-ptxjitcompiler.so.580.65.06::" + lib + "libnvidia-ptxjitcompiler.so.1",
		"libnvidia-ptxjitcompiler.so.1::" + lib + "libnvidia-ptxjitcompiler.so",
		"libnvidia-nvvm.so.580.65.06::" + lib + "libnvidia-nvvm.so.4",
		"libnvidia-nvvm.so.4::" + lib + "libnvidia-nvvm.so",
	}
	if !reflect.DeepEqual(f.Links, wantLinks) {
		t.Errorf("links = %q\nwant %q", f.Links, wantLinks)
	}
	wantLibs := []string{lib + "libcuda.so.1", lib + "libcuda.so", lib + "libnvidia-ml.so.1", lib + "libnvidia-ml.so", lib + "libnvidia-ptxjitcompiler.so.1", lib + "libnvidia-ptxjitcompiler.so", lib + "libnvidia-nvvm.so.4", lib + "libnvidia-nvvm.so"}
	if !reflect.DeepEqual(f.Libraries, wantLibs) {
		t.Errorf("libraries = %q\nwant %q", f.Libraries, wantLibs)
	}
	if !reflect.DeepEqual(f.LibDirs, []string{"/usr/lib/x86_64-linux-gnu"}) {
		t.Errorf("lib dirs = %v", f.LibDirs)
	}
	var ctl []string
	for _, n := range f.ControlNodes {
		ctl = append(ctl, n.Path)
		if n.HostPath != filepath.Join(root, n.Path) || n.Type != "c" {
			t.Errorf("control node %+v", n)
		}
	}
	if strings.Join(ctl, " ") != "/dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia-modeset" {
		t.Errorf("control nodes = %v", ctl)
	}
	var mounts []string
	for _, m := range f.Mounts {
		mounts = append(mounts, m.ContainerPath)
		if m.HostPath != filepath.Join(root, m.ContainerPath) {
			t.Errorf("mount %+v: host path not under the root", m)
		}
	}
	want := []string{lib + "libcuda.so.580.65.06", lib + "libnvidia-ml.so.580.65.06", lib + "libnvidia-ptxjitcompiler.so.580.65.06", lib + "libnvidia-nvvm.so.580.65.06",
		"/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-server", "/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin"}
	if !reflect.DeepEqual(mounts, want) {
		t.Errorf("mounts = %v\nwant %v", mounts, want)
	}
	g, err := f.GPUNode(0)
	if err != nil || *g != (specs.DeviceNode{Path: "/dev/nvidia0", HostPath: filepath.Join(root, "dev/nvidia0"), Type: "c", Major: 195, Minor: 0}) {
		t.Errorf("GPU node = %+v, %v", g, err)
	}
	// MIG device 0 of the h100 profile: GI 7, CI 0 -> minors 66 and 67.
	mig, err := f.MIGNodes(0, 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	if mig[0].Path != "/dev/nvidia-caps/nvidia-cap66" || mig[1].Path != "/dev/nvidia-caps/nvidia-cap67" || mig[1].Major != 511 || mig[1].Minor != 67 {
		t.Errorf("MIG nodes = %+v", mig)
	}
}

func TestDiscoverCapabilityFallback(t *testing.T) {
	root, p := fakeRoot(t, "h100")
	os.Remove(filepath.Join(root, "proc/driver/nvidia-caps/mig-minors"))
	for rel, minor := range map[string]string{"gi8/access": "75", "gi8/ci0/access": "76"} {
		fp := filepath.Join(root, "proc/driver/nvidia/capabilities/gpu0/mig", rel)
		os.MkdirAll(filepath.Dir(fp), 0o755)
		os.WriteFile(fp, []byte("DeviceFileMinor: "+minor+"\nDeviceFileMode: 292\nDeviceFileModify: 1\n"), 0o444)
	}
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	mig, err := f.MIGNodes(0, 8, 0)
	if err != nil || mig[0].Minor != 75 || mig[1].Minor != 76 {
		t.Fatalf("MIG nodes = %+v, %v", mig, err)
	}
	if _, err := f.MIGNodes(0, 9, 0); err == nil || !strings.Contains(err.Error(), "MIG capability gpu0/gi9/access") {
		t.Fatalf("missing capability: err = %v", err)
	}
}

func TestDiscoverLibraryFallbackWithoutCache(t *testing.T) {
	root, p := fakeRoot(t, "l40s")
	// Move the libraries to a folder only the cache knows, then check the
	// cache is what finds them.
	other := filepath.Join(root, "opt/nvidia/lib")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(root, "etc/ld.so.conf.d/x86_64-linux-gnu.conf"), []byte("/opt/nvidia/lib\n"), 0o644)
	matches, _ := filepath.Glob(filepath.Join(root, fakehost.LibDir, "lib*"))
	for _, m := range matches {
		os.Rename(m, filepath.Join(other, filepath.Base(m)))
	}
	run(t, "ldconfig", "-r", root)
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	if f.LibDirs[0] != "/opt/nvidia/lib" {
		t.Errorf("lib dirs = %v, want the cache's folder", f.LibDirs)
	}
	// Without a cache, the folder is unknown and libcuda is missing.
	os.Remove(filepath.Join(root, "etc/ld.so.cache"))
	if _, err := Discover(root, root, p.DriverVersion); err == nil || !strings.Contains(err.Error(), "driver library libcuda.so.580.65.06 not found under driver root") {
		t.Errorf("err = %v", err)
	}
}

func TestDiscoverErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		breakRoot func(root string)
		want      string
	}{
		{"no driver root", func(root string) { os.RemoveAll(root) }, "driver root"},
		{"corrupt cache", func(root string) {
			os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), []byte("glibc-ld.so.cache1.1 truncated"), 0o644)
		}, "linker cache "},
		{"unreadable cache", func(root string) {
			os.Remove(filepath.Join(root, "etc/ld.so.cache"))
			os.Mkdir(filepath.Join(root, "etc/ld.so.cache"), 0o755)
		}, "linker cache"},
		{"no nvidiactl", func(root string) { os.Remove(filepath.Join(root, "dev/nvidiactl")) }, "is the NVIDIA driver loaded?"},
		{"nvidiactl not a device", func(root string) {
			os.Remove(filepath.Join(root, "dev/nvidiactl"))
			os.WriteFile(filepath.Join(root, "dev/nvidiactl"), nil, 0o644)
		}, "is not a device"},
		{"wrong version", func(root string) {
			m, _ := filepath.Glob(filepath.Join(root, fakehost.LibDir, "libcuda.so.*"))
			for _, f := range m {
				os.Rename(f, strings.Replace(f, "580.65.06", "570.1.2", 1))
			}
		}, "is driver 580.65.06 installed there?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, p := fakeRoot(t, "l40s")
			tc.breakRoot(root)
			_, err := Discover(root, root, p.DriverVersion)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

func TestStandard(t *testing.T) {
	f := Standard("580.65.06", 510, 511)
	if len(f.ControlNodes) != 4 || *f.ControlNodes[1] != (specs.DeviceNode{Path: "/dev/nvidia-uvm", Type: "c", Major: 510, Minor: 0}) {
		t.Errorf("control nodes = %+v", f.ControlNodes)
	}
	mig, err := f.MIGNodes(1, 0, 0)
	if err != nil || mig[0].Minor != 138 || mig[1].Minor != 139 || mig[0].Major != 511 {
		t.Errorf("MIG nodes of GPU 1 GI 0 = %+v, %v (want minors 138, 139)", mig, err)
	}
	g, _ := f.GPUNode(7)
	if g.Minor != 7 || g.Major != 195 || g.HostPath != "" {
		t.Errorf("GPU node = %+v", g)
	}
	if _, err := f.nodes.node("/dev/nvidiafoo"); err == nil {
		t.Error("nonsense node accepted")
	}
}

func TestParseMIGMinors(t *testing.T) {
	m, err := ParseMIGMinors([]byte("config 1\nmonitor 2\ngpu0/gi0/access 3\n\ngpu0/gi0/ci0/access 4\n"))
	if err != nil || m["gpu0/gi0/ci0/access"] != 4 || len(m) != 4 {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"gpu0 x\n", "a b c\n", "gpu0/gi0/access -1\n"} {
		if _, err := ParseMIGMinors([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", name, err, out)
	}
}

// TestDiscoverDebianAlternatives: Debian's driver packages install the
// libraries in /usr/lib/x86_64-linux-gnu/nvidia/current and give their
// SONAMEs in /usr/lib/x86_64-linux-gnu as links through /etc/alternatives
// (absolute, so resolved under the driver root), which is what the linker
// cache lists. Discovery follows them to the files.
func TestDiscoverDebianAlternatives(t *testing.T) {
	root, p := fakeRoot(t, "l40s")
	current := fakehost.LibDir + "/nvidia/current"
	os.MkdirAll(filepath.Join(root, current), 0o755)
	os.MkdirAll(filepath.Join(root, "etc/alternatives"), 0o755)
	matches, _ := filepath.Glob(filepath.Join(root, fakehost.LibDir, "lib*"))
	for _, m := range matches {
		os.Rename(m, filepath.Join(root, current, filepath.Base(m)))
	}
	for _, soname := range fakehost.Libraries {
		alt := "/etc/alternatives/" + soname + "-x86_64-linux-gnu"
		if err := os.Symlink(current+"/"+soname, filepath.Join(root, alt)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(alt, filepath.Join(root, fakehost.LibDir, soname)); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "ldconfig", "-r", root)
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(f.LibDirs, current) {
		t.Errorf("lib dirs = %v, want %s", f.LibDirs, current)
	}
	want := current + "/libcuda.so." + p.DriverVersion
	found := false
	for _, m := range f.Mounts {
		if m.ContainerPath == want {
			found = m.HostPath == filepath.Join(root, want)
		}
	}
	if !found {
		t.Errorf("no mount of %s: %v", want, f.Mounts)
	}
	if !contains(f.Links, "libcuda.so."+p.DriverVersion+"::"+current+"/libcuda.so.1") {
		t.Errorf("links = %v", f.Links)
	}
}

// TestResolve: links are followed under the root, never out of it, and a
// loop ends.
func TestResolve(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "lib/nvidia"), 0o755)
	writeFile(t, filepath.Join(root, "lib/nvidia/libx.so.1.0"), "")
	for link, target := range map[string]string{
		"lib/libx.so.1": "/etc/alt/libx", "etc/alt/libx": "../../lib/nvidia/libx.so.1.0",
		"lib/up": "../../../../lib/nvidia/libx.so.1.0",
		"lib/a":  "b", "lib/b": "a",
		"lib/gone": "/nowhere",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, link)), 0o755)
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{
		"/lib/libx.so.1": "/lib/nvidia/libx.so.1.0",
		"/lib/up":        "/lib/nvidia/libx.so.1.0",
		"/lib/a":         "",
		"/lib/gone":      "",
		"/lib/nvidia":    "/lib/nvidia",
	} {
		if got := resolve(Root(root), p); got != want {
			t.Errorf("resolve(%s) = %q, want %q", p, got, want)
		}
	}
}

// TestDiscoverLibraryFoldersWithoutCache: without a linker cache under the
// driver root, the library folders searched are those of the
// distributions gpuctk is packaged for: x86-64 and arm64, multiarch and
// lib64, and Debian's nvidia/current, as nvidia-ctk's.
func TestDiscoverLibraryFoldersWithoutCache(t *testing.T) {
	for _, dir := range []string{
		"/usr/lib64",
		"/usr/lib/aarch64-linux-gnu",
		"/lib/aarch64-linux-gnu",
		"/usr/lib/x86_64-linux-gnu/nvidia/current",
		"/usr/lib/aarch64-linux-gnu/nvidia/current",
	} {
		t.Run(dir, func(t *testing.T) {
			root, p := fakeRoot(t, "l40s")
			os.Remove(filepath.Join(root, "etc/ld.so.cache"))
			tmp := filepath.Join(root, "moving")
			if err := os.Rename(filepath.Join(root, fakehost.LibDir), tmp); err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(filepath.Dir(filepath.Join(root, dir)), 0o755)
			if err := os.Rename(tmp, filepath.Join(root, dir)); err != nil {
				t.Fatal(err)
			}
			f, err := Discover(root, root, p.DriverVersion)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(f.LibDirs, []string{dir}) {
				t.Errorf("lib dirs = %v, want [%s]", f.LibDirs, dir)
			}
			if nvml, err := FindLibrary(root, "libnvidia-ml.so.1"); err != nil || nvml != filepath.Join(root, dir, "libnvidia-ml.so.1") {
				t.Errorf("FindLibrary(libnvidia-ml.so.1) = %s, %v", nvml, err)
			}
		})
	}
}

// TestDiscoverRootSpellings: the driver root as a link, with a trailing
// slash, "/." or a doubled slash is the same root: each file is where the
// container expects it, the programs in /usr/bin too.
func TestDiscoverRootSpellings(t *testing.T) {
	root, p := fakeRoot(t, "l40s")
	link := filepath.Join(t.TempDir(), "driver")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{link, link + "/", root + "/.", filepath.Dir(root) + "//" + filepath.Base(root)} {
		f, err := Discover(r, r, p.DriverVersion)
		if err != nil {
			t.Errorf("%s: %v", r, err)
			continue
		}
		for _, m := range f.Mounts {
			if !strings.HasPrefix(m.ContainerPath, "/usr/") && !strings.HasPrefix(m.ContainerPath, "/lib/") {
				t.Errorf("driver root %s: %s mounted at %s", r, m.HostPath, m.ContainerPath)
			}
		}
	}
}

// TestBinaryLinks: a driver program that is an absolute link (Debian's
// alternatives) is followed under the driver root, not in the namespace
// gpuctk runs in (the device plugin's image, with the host at
// /driver-root): the file it leads to is mounted at the program's usual
// path and is what FindBinary gives to run.
func TestBinaryLinks(t *testing.T) {
	root, p := fakeRoot(t, "l40s")
	const smi, real = "/usr/bin/nvidia-smi", "/usr/lib/nvidia/current/nvidia-smi"
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(real)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, smi), filepath.Join(root, real)); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "etc/alternatives"), 0o755)
	if err := os.Symlink(real, filepath.Join(root, "etc/alternatives/nvidia--nvidia-smi")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/alternatives/nvidia--nvidia-smi", filepath.Join(root, smi)); err != nil {
		t.Fatal(err)
	}
	got, err := FindBinary(root, "nvidia-smi")
	if err != nil || got != filepath.Join(root, real) {
		t.Errorf("FindBinary: %q, %v; want %s", got, err, filepath.Join(root, real))
	}
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range f.Mounts {
		if m.ContainerPath == smi {
			found = m.HostPath == filepath.Join(root, real)
		}
	}
	if !found {
		t.Errorf("no mount of %s from %s: %v", smi, filepath.Join(root, real), f.Mounts)
	}
}
