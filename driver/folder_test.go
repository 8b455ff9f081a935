package driver

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
)

// folderRoot is a driver root with a few of the driver's files: two
// libraries, a program, a firmware file, a graphics library, a socket and
// a library that is a link.
func folderRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range []string{
		"/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.65.06",
		"/usr/bin/nvidia-smi",
		"/usr/bin/sh", // not the driver's: /usr/bin is never mounted whole
		"/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin",
		"/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.580.65.06",
		"/usr/lib/x86_64-linux-gnu/libreal.so.1",
		"/usr/share/vulkan/icd.d/nvidia_icd.json",
		"/usr/share/vulkansc/icd.d/nvidia_icd.json",
		// Mesa's, beside the driver's
		"/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
		"/usr/share/vulkansc/icd.d/lvp_icd.x86_64.json",
	} {
		write(t, filepath.Join(root, p), p)
	}
	if err := os.Symlink("libreal.so.1", filepath.Join(root, "/usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.580.65.06")); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, "/run/nvidia-persistenced/socket")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return root
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// folderFiles are the Files discovery would give for folderRoot.
func folderFiles(root string) *Files {
	m := func(p string, opts []string) *specs.Mount {
		return &specs.Mount{HostPath: filepath.Join(root, p), ContainerPath: p, Options: opts}
	}
	return &Files{
		Version: "580.65.06",
		Mounts: []*specs.Mount{
			m("/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", fileOptions),
			m("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.65.06", fileOptions),
			m("/usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.580.65.06", fileOptions),
			m("/usr/bin/nvidia-smi", fileOptions),
			m("/lib/firmware/nvidia/580.65.06/gsp_ga10x.bin", firmwareOptions),
			m("/run/nvidia-persistenced/socket", socketOptions),
		},
		CapabilityMounts: map[capability.Capability][]*specs.Mount{
			capability.Graphics: {
				m("/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.580.65.06", fileOptions),
				m("/usr/share/vulkan/icd.d/nvidia_icd.json", fileOptions),
				m("/usr/share/vulkansc/icd.d/nvidia_icd.json", fileOptions),
			},
		},
	}
}

func mountPaths(ms []*specs.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ContainerPath)
	}
	return out
}

func TestGather(t *testing.T) {
	root := folderRoot(t)
	lib := "/usr/lib/x86_64-linux-gnu/"

	// check and info never make the folder: the files stay mounted one
	// by one, but for the firmware's folder, which holds nothing else
	// and is mounted whole where the host has it.
	f := folderFiles(root)
	dir, err := f.Gather(root, false)
	if dir != "" || err != nil || len(f.Linked) != 0 || len(f.Mounts) != 6 {
		t.Fatalf("Gather without create and without a folder = %q, %v, %d links, %d mounts; want nothing done", dir, err, len(f.Linked), len(f.Mounts))
	}
	if m := f.Mounts[0]; m.HostPath != filepath.Join(root, "/lib/firmware/nvidia/580.65.06") || m.ContainerPath != "/lib/firmware/nvidia/580.65.06" || strings.Join(m.Options, ",") != "ro,nosuid,nodev,noexec,bind" {
		t.Errorf("firmware mount without a folder = %+v, want its host folder mounted whole", m)
	}
	if _, err := os.Stat(filepath.Join(root, FolderStore)); !os.IsNotExist(err) {
		t.Fatalf("Gather without create made %s: %v", FolderStore, err)
	}

	// An SELinux label on the libraries' folder (root may set one where
	// SELinux is off): the core folder takes it.
	const label = "system_u:object_r:lib_t:s0\x00"
	labelled := os.Geteuid() == 0
	if labelled {
		if err := unix.Lsetxattr(filepath.Join(root, lib), "security.selinux", []byte(label), 0); err != nil {
			t.Fatal(err)
		}
	}
	f = folderFiles(root)
	dir, err = f.Gather(root, true)
	if err != nil {
		t.Fatal(err)
	}
	if labelled {
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(filepath.Join(dir, "core"), "security.selinux", buf)
		if err != nil || string(buf[:max(n, 0)]) != label {
			t.Errorf("core folder's label %q, %v; want the library folder's %q", buf[:max(n, 0)], err, label)
		}
	} else {
		t.Log("not root: the SELinux label's copy is not tried")
	}
	if !strings.HasPrefix(dir, filepath.Join(root, FolderStore, "580.65.06-")) {
		t.Fatalf("folder %s: want one of driver 580.65.06 in %s", dir, FolderStore)
	}
	// The link and the socket stay mounted; the rest is one folder mount
	// a group, the firmware's at its own folder, named for the version.
	want := []string{"/usr/lib/gpuctk/core", "/lib/firmware/nvidia/580.65.06", lib + "libnvidia-cfg.so.580.65.06", "/run/nvidia-persistenced/socket"}
	if got := mountPaths(f.Mounts); !reflect.DeepEqual(got, want) {
		t.Errorf("common mounts = %q\nwant %q", got, want)
	}
	if m := f.Mounts[0]; m.HostPath != filepath.Join(dir, "core") || strings.Join(m.Options, ",") != "ro,nosuid,nodev,bind" {
		t.Errorf("folder mount = %+v", m)
	}
	// The firmware, mounted noexec, is in a folder mounted noexec, where
	// the host has it: no link for the hook to make.
	if m := f.Mounts[1]; m.HostPath != filepath.Join(dir, "firmware") || strings.Join(m.Options, ",") != "ro,nosuid,nodev,noexec,bind" {
		t.Errorf("data folder mount = %+v", m)
	}
	if got := mountPaths(f.CapabilityMounts[capability.Graphics]); !reflect.DeepEqual(got, []string{"/usr/lib/gpuctk/graphics"}) {
		t.Errorf("graphics mounts = %q", got)
	}
	var linked []string
	for _, l := range f.Linked {
		linked = append(linked, l.String())
	}
	// Flat, a name two files share numbered.
	wantLinked := []string{
		"/usr/lib/gpuctk/core/libcuda.so.580.65.06::" + lib + "libcuda.so.580.65.06",
		"/usr/lib/gpuctk/core/libnvidia-ml.so.580.65.06::" + lib + "libnvidia-ml.so.580.65.06",
		"/usr/lib/gpuctk/core/nvidia-smi::/usr/bin/nvidia-smi",
		"/usr/lib/gpuctk/graphics/libGLX_nvidia.so.580.65.06::" + lib + "libGLX_nvidia.so.580.65.06",
		"/usr/lib/gpuctk/graphics/nvidia_icd.json::/usr/share/vulkan/icd.d/nvidia_icd.json",
		"/usr/lib/gpuctk/graphics/2-nvidia_icd.json::/usr/share/vulkansc/icd.d/nvidia_icd.json",
	}
	if !reflect.DeepEqual(linked, wantLinked) {
		t.Errorf("linked = %q\nwant %q", linked, wantLinked)
	}
	// Each file is there as the host's own inode.
	for _, l := range f.Linked {
		var a, b unix.Stat_t
		if err := unix.Stat(filepath.Join(root, l.Path), &a); err != nil {
			t.Fatal(err)
		}
		if err := unix.Lstat(filepath.Join(dir, strings.TrimPrefix(l.Target, FolderMounts)), &b); err != nil || a.Ino != b.Ino {
			t.Errorf("%s in the folder: %v (inode %d, the host's %d)", l.Path, err, b.Ino, a.Ino)
		}
	}

	// A second generate that found no folder and built one meanwhile
	// keeps the first's: a container may have it mounted.
	var before, after unix.Stat_t
	unix.Stat(dir, &before)
	if err := (&gatherer{}).makeFolder(dir, folderFiles(root).gatherable(root), false); err != nil {
		t.Fatal(err)
	}
	if unix.Stat(dir, &after); after.Ino != before.Ino {
		t.Errorf("a racing makeFolder replaced the folder (inode %d, was %d)", after.Ino, before.Ino)
	}
	if left, _ := filepath.Glob(filepath.Join(root, FolderStore, ".tmp-*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}

	// Found again by a later run, made or not: hard links move a file's
	// change time, which the folder's name must not depend on.
	for _, create := range []bool{false, true} {
		again := folderFiles(root)
		if d, err := again.Gather(root, create); d != dir || err != nil {
			t.Errorf("Gather again (create %v) = %q, %v; want %q", create, d, err, dir)
		}
	}

	// A file replaced (a reinstall): another folder, never the old links.
	p := filepath.Join(root, lib, "libcuda.so.580.65.06")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	write(t, p, "reinstalled")
	again := folderFiles(root)
	if d, err := again.Gather(root, false); d != "" || err != nil {
		t.Errorf("Gather without create after a reinstall = %q, %v; want the files mounted", d, err)
	}
	newer, err := again.Gather(root, true)
	if err != nil || newer == dir || newer == "" {
		t.Fatalf("Gather after a reinstall = %q, %v; want a new folder beside %s", newer, err, dir)
	}
	if data, err := os.ReadFile(filepath.Join(newer, "core", "libcuda.so.580.65.06")); string(data) != "reinstalled" {
		t.Errorf("new folder's libcuda = %q, %v", data, err)
	}
}

func TestGatherCannot(t *testing.T) {
	for _, tc := range []struct {
		name, why string
		break_    func(t *testing.T, root string)
	}{
		{"store is a file", "not a directory", func(t *testing.T, root string) {
			write(t, filepath.Join(root, FolderStore), "")
		}},
		{"half-built", "", func(t *testing.T, root string) {
			// A folder of that name with other files (a run that
			// failed half-way): replaced whole.
			f := folderFiles(root)
			name := folderName(f.Version, f.gatherable(root))
			write(t, filepath.Join(root, FolderStore, name, "core/stray"), "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := folderRoot(t)
			tc.break_(t, root)
			f := folderFiles(root)
			dir, err := f.Gather(root, true)
			if tc.why == "" {
				if err != nil || dir == "" {
					t.Fatalf("Gather = %q, %v", dir, err)
				}
				if _, err := os.Stat(filepath.Join(dir, "core/stray")); !os.IsNotExist(err) {
					t.Errorf("stray file kept in the folder: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.why) || dir != "" {
				t.Fatalf("Gather = %q, %v; want an error saying %q", dir, err, tc.why)
			}
			if len(f.Linked) != 0 || len(f.Mounts) != 6 || len(f.CapabilityMounts[capability.Graphics]) != 3 || f.Mounts[0].ContainerPath != "/lib/firmware/nvidia/580.65.06" {
				t.Errorf("files changed by a failed Gather: %d links, mounts %q", len(f.Linked), mountPaths(f.Mounts))
			}
			if left, _ := filepath.Glob(filepath.Join(root, FolderStore, ".tmp-*")); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func TestPruneFolders(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, FolderStore)
	old := time.Now().Add(-2 * time.Hour)
	for _, n := range []string{"580.65.06-aaaa", "580.65.06-bbbb", "575.57.08-cccc", ".tmp-580.65.06-dddd-1", ".tmp-580.65.06-eeee-2"} {
		write(t, filepath.Join(store, n, "common/f"), "")
	}
	if err := os.Chtimes(filepath.Join(store, ".tmp-580.65.06-eeee-2"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := PruneFolders(filepath.Join(store, "580.65.06-aaaa")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(store)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	// Another version's folder and a half-built one of long ago go; the
	// same version's stay (a running container may have one mounted), and
	// so does one being built now.
	want := []string{".tmp-580.65.06-dddd-1", "580.65.06-aaaa", "580.65.06-bbbb"}
	if !reflect.DeepEqual(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if err := PruneFolders(filepath.Join(t.TempDir(), "x", "580-a")); err != nil {
		t.Errorf("no store: %v", err)
	}
}

// TestInPlace: a group is mounted where its files are only when they all
// sit, under their own names, in one folder named for the driver version.
func TestInPlace(t *testing.T) {
	file := func(group, name, containerPath string) gathered {
		return gathered{group: group, name: name, m: &specs.Mount{ContainerPath: containerPath}}
	}
	const fw = "/lib/firmware/nvidia/580.65.06/"
	for _, tc := range []struct {
		name    string
		version string
		files   []gathered
		want    map[string]string
	}{
		{"firmware", "580.65.06", []gathered{
			file("core", "libcuda.so.580.65.06", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"),
			file("firmware", "gsp_ga10x.bin", fw+"gsp_ga10x.bin"),
			file("firmware", "gsp_tu10x.bin", fw+"gsp_tu10x.bin"),
		}, map[string]string{"firmware": "/lib/firmware/nvidia/580.65.06"}},
		{"another version's folder", "580.65.07", []gathered{
			file("firmware", "gsp_ga10x.bin", fw+"gsp_ga10x.bin"),
		}, map[string]string{}},
		{"no version", "", []gathered{
			file("firmware", "gsp_ga10x.bin", fw+"gsp_ga10x.bin"),
		}, map[string]string{}},
		{"two folders", "580.65.06", []gathered{
			file("firmware", "gsp_ga10x.bin", fw+"gsp_ga10x.bin"),
			file("firmware", "gsp_tu10x.bin", "/usr/lib/firmware/nvidia/580.65.06/gsp_tu10x.bin"),
		}, map[string]string{}},
		{"a file renamed in the folder", "580.65.06", []gathered{
			file("firmware", "gsp_ga10x.bin", fw+"gsp_ga10x.bin"),
			file("firmware", "2-gsp_ga10x.bin", fw+"gsp_ga10x.bin"),
		}, map[string]string{}},
		{"the image's shared folder", "580.65.06", []gathered{
			file("graphics-data", "nvidia_icd.json", "/usr/share/vulkan/icd.d/nvidia_icd.json"),
		}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := inPlace(tc.version, tc.files); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("inPlace = %q, want %q", got, tc.want)
			}
		})
	}
}
