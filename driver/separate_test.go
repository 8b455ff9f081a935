package driver

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
)

// The driver on a file system of its own: a tmpfs mounted under a fake
// driver root, read-only as a squashfs is, and Gather's answers there
// against the same layout on one file system.

const sepVersion = "580.159.04"

// ownFS mounts a tmpfs at dir (made), fills it with files (path ->
// content; a content starting with "->" makes a link), and remounts it
// read-only; it is unmounted when the test ends.
func ownFS(t *testing.T, dir string, files map[string]string, more ...func(dir string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (mounts a tmpfs), and CI must run it")
		}
		t.Skip("needs root: mounts a tmpfs")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	fill(t, dir, files)
	for _, m := range more {
		m(dir)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
}

func fill(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(dir, p)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		write(t, filepath.Join(dir, p), content)
	}
}

// prefixFiles is a driver prefix as the GPU host of RECIPE.md has it at
// /usr/local/nvidia: libraries (vdpau's too) with their links in lib64/,
// programs in bin/, the GSP firmware, the JSON files in share/.
func prefixFiles() map[string]string {
	v := sepVersion
	return map[string]string{
		"lib64/libcuda.so." + v:                   "libcuda",
		"lib64/libcuda.so.1":                      "->libcuda.so." + v,
		"lib64/libcuda.so":                        "->libcuda.so.1",
		"lib64/libnvidia-ml.so." + v:              "nvml",
		"lib64/libnvidia-ml.so.1":                 "->libnvidia-ml.so." + v,
		"lib64/libnvidia-ptxjitcompiler.so." + v:  "ptxjit",
		"lib64/libGLX_nvidia.so." + v:             "glx",
		"lib64/libvdpau_nvidia.so." + v:           "vdpau",
		"lib64/libnvidia-api.so.1":                "api",
		"lib64/libnvidia-gtk3.so." + v:            "gtk3",
		"bin/nvidia-smi":                          "smi",
		"bin/nvidia-cuda-mps-control":             "mps",
		"firmware/nvidia/" + v + "/gsp_ga10x.bin": "gsp",
		"firmware/nvidia/" + v + "/gsp_tu10x.bin": "gsp",
		"share/vulkan/icd.d/nvidia_icd.json":      "{}",
	}
}

// prefixHost lays a driver root out as that host: the prefix (on its own
// file system with sep set, more done to it before it goes read-only),
// /usr/bin/nvidia-smi a wrapper script, the glvnd file in /usr/share
// beside Mesa's. It returns the root and the Files discovery gives for it.
func prefixHost(t *testing.T, sep bool, extra map[string]string, more ...func(string)) (string, *Files) {
	t.Helper()
	root := t.TempDir()
	prefix := filepath.Join(root, "usr/local/nvidia")
	files := prefixFiles()
	for p, c := range extra {
		files[p] = c
	}
	if sep {
		ownFS(t, prefix, files, more...)
	} else {
		fill(t, prefix, files)
	}
	fill(t, root, map[string]string{
		"usr/bin/nvidia-smi": "#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n",
		"usr/bin/sh":         "sh",
		"usr/share/glvnd/egl_vendor.d/10_nvidia.json": "{}",
		"usr/share/glvnd/egl_vendor.d/50_mesa.json":   "{}",
	})
	return root, prefixHostFiles(root)
}

// prefixHostFiles are the Files discovery gives for prefixHost's root: the
// programs at /usr/bin, the rest where the host has it.
func prefixHostFiles(root string) *Files {
	m := func(host, at string, opts []string) *specs.Mount {
		return &specs.Mount{HostPath: filepath.Join(root, host), ContainerPath: at, Options: opts}
	}
	lib := "/usr/local/nvidia/lib64/"
	fw := "/usr/local/nvidia/firmware/nvidia/" + sepVersion + "/"
	return &Files{
		Version: sepVersion,
		Mounts: []*specs.Mount{
			m(lib+"libcuda.so."+sepVersion, lib+"libcuda.so."+sepVersion, fileOptions),
			m(lib+"libnvidia-ml.so."+sepVersion, lib+"libnvidia-ml.so."+sepVersion, fileOptions),
			m(lib+"libnvidia-ptxjitcompiler.so."+sepVersion, lib+"libnvidia-ptxjitcompiler.so."+sepVersion, fileOptions),
			m("/usr/local/nvidia/bin/nvidia-smi", "/usr/bin/nvidia-smi", fileOptions),
			m("/usr/local/nvidia/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-control", fileOptions),
			m(fw+"gsp_ga10x.bin", fw+"gsp_ga10x.bin", firmwareOptions),
			m(fw+"gsp_tu10x.bin", fw+"gsp_tu10x.bin", firmwareOptions),
		},
		CapabilityMounts: map[capability.Capability][]*specs.Mount{
			capability.Graphics: {
				m(lib+"libGLX_nvidia.so."+sepVersion, lib+"libGLX_nvidia.so."+sepVersion, fileOptions),
				m("/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json", fileOptions),
			},
			capability.Video: {
				m(lib+"libvdpau_nvidia.so."+sepVersion, lib+"libvdpau_nvidia.so."+sepVersion, fileOptions),
			},
		},
	}
}

// mountCounts are the mounts a container gets from f: the common edits',
// and each capability's added to them.
func mountCounts(f *Files) map[string]int {
	out := map[string]int{"common": len(f.Mounts)}
	for c, ms := range f.CapabilityMounts {
		out[string(c)] = len(ms)
	}
	return out
}

// TestGatherOwnFileSystem: the prefix on a read-only file system of its
// own is mounted whole, in no more mounts than the driver folder takes
// with the same files on one file system.
func TestGatherOwnFileSystem(t *testing.T) {
	sameRoot, same := prefixHost(t, false, nil)
	if dir, err := same.Gather(sameRoot, true); err != nil || dir == "" {
		t.Fatalf("one file system: Gather = %q, %v", dir, err)
	}
	root, f := prefixHost(t, true, nil)
	dir, err := f.Gather(root, true)
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(root, "usr/local/nvidia")
	if !reflect.DeepEqual(f.Whole, []string{prefix, filepath.Join(prefix, "firmware/nvidia", sepVersion)}) {
		t.Errorf("mounted whole: %q; want the prefix and the firmware's folder", f.Whole)
	}
	want := []*specs.Mount{
		{HostPath: prefix, ContainerPath: "/usr/lib/gpuctk/core", Options: folderMountOptions},
		{HostPath: filepath.Join(prefix, "firmware/nvidia", sepVersion), ContainerPath: "/usr/local/nvidia/firmware/nvidia/" + sepVersion, Options: dataFolderMountOptions},
	}
	if !reflect.DeepEqual(f.Mounts, want) {
		t.Errorf("common mounts:\n%s\nwant\n%s", dump(f.Mounts), dump(want))
	}
	// A capability has a mount of its own, which its device needs and
	// which the hook's links for it need in the container: vdpau's
	// library, in the prefix, has the prefix; graphics, whose glvnd file
	// is on the root's file system, has the driver folder of hard links,
	// where its library is a link into the common edits' mount.
	if got := f.CapabilityMounts[capability.Graphics]; len(got) != 1 || got[0].HostPath != filepath.Join(dir, "graphics") || got[0].ContainerPath != "/usr/lib/gpuctk/graphics" {
		t.Errorf("graphics mounts: %s; want the driver folder's graphics", dump(got))
	}
	if to, err := os.Readlink(filepath.Join(dir, "graphics/libGLX_nvidia.so."+sepVersion)); to != "../core/lib64/libGLX_nvidia.so."+sepVersion {
		t.Errorf("graphics' library in the driver folder: a link to %q, %v; want one into the common mount", to, err)
	}
	if got, want := f.CapabilityMounts[capability.Video], []*specs.Mount{{HostPath: prefix, ContainerPath: "/usr/lib/gpuctk/video", Options: folderMountOptions}}; !reflect.DeepEqual(got, want) {
		t.Errorf("video mounts: %s; want the prefix, its own", dump(got))
	}
	var linked []string
	for _, l := range f.Linked {
		linked = append(linked, l.String())
	}
	lib := "/usr/local/nvidia/lib64/"
	wantLinked := []string{
		"/usr/lib/gpuctk/core/lib64/libcuda.so." + sepVersion + "::" + lib + "libcuda.so." + sepVersion,
		"/usr/lib/gpuctk/core/lib64/libnvidia-ml.so." + sepVersion + "::" + lib + "libnvidia-ml.so." + sepVersion,
		"/usr/lib/gpuctk/core/lib64/libnvidia-ptxjitcompiler.so." + sepVersion + "::" + lib + "libnvidia-ptxjitcompiler.so." + sepVersion,
		"/usr/lib/gpuctk/core/bin/nvidia-smi::/usr/bin/nvidia-smi",
		"/usr/lib/gpuctk/core/bin/nvidia-cuda-mps-control::/usr/bin/nvidia-cuda-mps-control",
		"/usr/lib/gpuctk/graphics/libGLX_nvidia.so." + sepVersion + "::" + lib + "libGLX_nvidia.so." + sepVersion,
		"/usr/lib/gpuctk/graphics/10_nvidia.json::/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
		"/usr/lib/gpuctk/video/lib64/libvdpau_nvidia.so." + sepVersion + "::" + lib + "libvdpau_nvidia.so." + sepVersion,
	}
	if !reflect.DeepEqual(linked, wantLinked) {
		t.Errorf("linked:\n%s\nwant\n%s", strings.Join(linked, "\n"), strings.Join(wantLinked, "\n"))
	}
	// A container gets the driver's files in no more mounts than on one
	// file system, with any capability.
	sep, one := mountCounts(f), mountCounts(same)
	for k, n := range one {
		if sep[k] > n {
			t.Errorf("%s: %d mounts, %d on one file system", k, sep[k], n)
		}
	}
	t.Logf("mounts, own file system: %v; one file system: %v", sep, one)

	// check and info find the same without writing.
	again := prefixHostFiles(root)
	if d, err := again.Gather(root, false); d != dir || err != nil || !reflect.DeepEqual(again.Mounts, f.Mounts) || !reflect.DeepEqual(again.Linked, f.Linked) {
		t.Errorf("Gather without create = %q, %v, mounts %s; want what generate made", d, err, dump(again.Mounts))
	}
}

func dump(ms []*specs.Mount) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.HostPath+" -> "+m.ContainerPath+" "+strings.Join(m.Options, ","))
	}
	return strings.Join(out, "\n")
}

// TestGatherNotOwn: a folder with a file that is not the driver's (nor
// the folders above it) is never mounted whole; on another file system
// than the store, its files are copied there.
func TestGatherNotOwn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		extra   map[string]string
		more    func(prefix string)
		refused []string // under the prefix
	}{
		{"a foreign library", map[string]string{"lib64/libfoo.so.1": "foreign"}, nil, []string{".", "lib64"}},
		{"a foreign program", map[string]string{"bin/htop": "foreign"}, nil, []string{".", "bin"}},
		{"a link out of the prefix", map[string]string{"lib64/libc.so.6": "->/lib/x86_64-linux-gnu/libc.so.6"}, nil, []string{".", "lib64"}},
		{"a link that climbs out", map[string]string{"bin/x": "->../../bin/sh"}, nil, []string{".", "bin"}},
		{"a FIFO", nil, func(prefix string) {
			if err := unix.Mkfifo(filepath.Join(prefix, "lib64/fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{".", "lib64"}},
		{"a foreign file deep down", map[string]string{"share/doc/README": "foreign"}, nil, []string{"."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var more []func(string)
			if tc.more != nil {
				more = append(more, tc.more)
			}
			root, f := prefixHost(t, true, tc.extra, more...)
			store := t.TempDir()
			dir, err := f.Gather(root, true, WithStore(store, false))
			if err != nil {
				t.Fatal(err)
			}
			prefix := filepath.Join(root, "usr/local/nvidia")
			for _, r := range tc.refused {
				if slices.Contains(f.Whole, filepath.Join(prefix, r)) {
					t.Errorf("%s mounted whole, with a file that is not the driver's", filepath.Join(prefix, r))
				}
			}
			if !strings.HasPrefix(dir, store+"/") {
				t.Fatalf("folder %q, want one in the store %s", dir, store)
			}
			if slices.Contains(tc.refused, "lib64") {
				// The libraries are copies: other inodes, the same bytes.
				var a, b unix.Stat_t
				src := filepath.Join(prefix, "lib64/libcuda.so."+sepVersion)
				copied := filepath.Join(dir, "core/libcuda.so."+sepVersion)
				if err := unix.Stat(src, &a); err != nil {
					t.Fatal(err)
				}
				if err := unix.Stat(copied, &b); err != nil || a.Ino == b.Ino && a.Dev == b.Dev {
					t.Fatalf("%s: %v, want a copy of %s", copied, err, src)
				}
				if data, _ := os.ReadFile(copied); string(data) != "libcuda" || b.Mtim != a.Mtim || b.Mode&0o777 != a.Mode&0o777 {
					t.Errorf("copy holds %q, mtime %v mode %o; want the source's (%v, %o)", data, b.Mtim, b.Mode&0o777, a.Mtim, a.Mode&0o777)
				}
			}
			t.Logf("mounted whole: %q; folder %s; mounts %v", f.Whole, dir, mountCounts(f))
		})
	}
}

// TestGatherCopyStore: a distribution's layout on a read-only file system
// of its own (the device plugin's view of the host, a driver container):
// the library folder holds the system's libraries too, so the files are
// copied into the store, once, and found there again.
func TestGatherCopyStore(t *testing.T) {
	root := t.TempDir()
	v := sepVersion
	lib := "/usr/lib/x86_64-linux-gnu/"
	ownFS(t, root, map[string]string{
		lib + "libcuda.so." + v:                        "libcuda",
		lib + "libnvidia-ml.so." + v:                   "nvml",
		lib + "libc.so.6":                              "glibc",
		"/usr/bin/nvidia-smi":                          "smi",
		"/usr/bin/sh":                                  "sh",
		"/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin": "gsp",
	})
	m := func(p string, opts []string) *specs.Mount {
		return &specs.Mount{HostPath: filepath.Join(root, p), ContainerPath: p, Options: opts}
	}
	files := func() *Files {
		return &Files{Version: v, Mounts: []*specs.Mount{
			m(lib+"libcuda.so."+v, fileOptions), m(lib+"libnvidia-ml.so."+v, fileOptions),
			m("/usr/bin/nvidia-smi", fileOptions), m("/lib/firmware/nvidia/"+v+"/gsp_ga10x.bin", firmwareOptions),
		}}
	}
	store := filepath.Join(t.TempDir(), "driver")

	// A store that must exist (a container's hostPath) and does not.
	if dir, err := files().Gather(root, true, WithStore(store, false)); dir != "" || err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Gather with a missing store = %q, %v", dir, err)
	}
	// Bounded: copies over the bound, or that would leave too little
	// free, are refused, and nothing is left.
	for _, limits := range []struct {
		maxCopy, keepFree int64
		why               string
	}{{10, 0, "more than 10 bytes, the bound"}, {1 << 40, 1 << 50, "MiB free there, and copies leave at least 1073741824 MiB free"}} {
		f := files()
		dir, err := f.Gather(root, true, WithStore(store, true), WithCopyLimits(limits.maxCopy, limits.keepFree))
		if dir != "" || err == nil || !strings.Contains(err.Error(), limits.why) {
			t.Errorf("Gather over the bound = %q, %v; want %q said", dir, err, limits.why)
		}
		if left, _ := filepath.Glob(filepath.Join(store, "*")); len(left) > 0 {
			t.Errorf("left in the store: %q", left)
		}
		if got := f.Mounts[1].HostPath; got != filepath.Join(root, lib+"libcuda.so."+v) {
			t.Errorf("over the bound, libcuda is mounted from %s; want its own mount", got)
		}
	}

	f := files()
	dir, err := f.Gather(root, true, WithStore(store, true))
	if err != nil || !strings.HasPrefix(dir, store+"/"+v+"-") {
		t.Fatalf("Gather = %q, %v; want a folder of driver %s in %s", dir, err, v, store)
	}
	var mounts []string
	for _, ms := range f.Mounts {
		mounts = append(mounts, ms.HostPath+" -> "+ms.ContainerPath)
	}
	want := []string{filepath.Join(dir, "core") + " -> /usr/lib/gpuctk/core", filepath.Join(root, "/lib/firmware/nvidia", v) + " -> /lib/firmware/nvidia/" + v}
	if !reflect.DeepEqual(mounts, want) {
		t.Errorf("mounts %q\nwant %q", mounts, want)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "core/nvidia-smi")); string(data) != "smi" {
		t.Errorf("copied nvidia-smi: %q, %v", data, err)
	}
	// Found again, made or not: no second copy.
	for _, create := range []bool{false, true} {
		again := files()
		if d, err := again.Gather(root, create, WithStore(store, true)); d != dir || err != nil || !reflect.DeepEqual(again.Linked, f.Linked) {
			t.Errorf("Gather again (create %v) = %q, %v", create, d, err)
		}
	}
	if entries, _ := os.ReadDir(store); len(entries) != 1 {
		t.Errorf("store holds %d entries, want the one folder", len(entries))
	}
	// Another driver version's folder goes.
	old := filepath.Join(store, "575.57.08-0123456789abcdef")
	write(t, filepath.Join(old, "core/libcuda.so.575.57.08"), "")
	if err := PruneFolders(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err == nil {
		t.Errorf("the older driver's folder stays: %v", err)
	}
}

// TestShared: the distribution's folders, and those above them, are never
// mounted whole, whatever they hold; a prefix of the driver's own is.
func TestShared(t *testing.T) {
	for rel, want := range map[string]bool{
		"usr": true, "usr/lib": true, "usr/lib/x86_64-linux-gnu": true, "usr/bin": true, "usr/local": true,
		"usr/share": true, "usr/share/vulkan/icd.d": true, "etc": true, "lib/firmware": true,
		"usr/local/nvidia": false, "usr/local/nvidia/lib64": false, "home/kubernetes/bin/nvidia/lib64": false,
		"lib/firmware/nvidia/580.65.06": false, "usr/lib/x86_64-linux-gnu/nvidia/current/vdpau": false,
	} {
		if got := shared(rel); got != want {
			t.Errorf("shared(%q) = %v, want %v", rel, got, want)
		}
	}
}

// TestGatherLooseCoreFile: a file of the common edits outside the
// prefix (OpenCL's vendor file in /etc, which the host's file system
// holds) goes into the driver folder alone; the prefix is still mounted
// whole and the libraries are not copied.
func TestGatherLooseCoreFile(t *testing.T) {
	root, f := prefixHost(t, true, nil)
	fill(t, root, map[string]string{"etc/OpenCL/vendors/nvidia.icd": "libnvidia-opencl.so.1\n"})
	f.Mounts = append(f.Mounts, &specs.Mount{HostPath: filepath.Join(root, "etc/OpenCL/vendors/nvidia.icd"), ContainerPath: "/etc/OpenCL/vendors/nvidia.icd", Options: fileOptions})
	dir, err := f.Gather(root, true)
	if err != nil || dir == "" {
		t.Fatalf("Gather = %q, %v; want a driver folder for the vendor file", dir, err)
	}
	prefix := filepath.Join(root, "usr/local/nvidia")
	if !slices.Contains(f.Whole, prefix) {
		t.Errorf("mounted whole: %q; want the prefix still", f.Whole)
	}
	core, err := os.ReadDir(filepath.Join(dir, CoreGroup))
	if err != nil || len(core) != 1 || core[0].Name() != "nvidia.icd" {
		t.Errorf("the driver folder's core: %v, %v; want the vendor file alone", core, err)
	}
	var points []string
	for _, m := range f.Mounts {
		points = append(points, m.ContainerPath)
	}
	if len(f.Mounts) != 3 || len(slices.Compact(slices.Sorted(slices.Values(points)))) != 3 {
		t.Errorf("common mounts:\n%s\nwant the prefix, the firmware and the driver folder's core, each at a point of its own", dump(f.Mounts))
	}
}
