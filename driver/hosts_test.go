package driver

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// mountsOf returns every mount of f, common and per capability, by
// container path.
func mountsOf(f *Files) map[string]*specs.Mount {
	out := map[string]*specs.Mount{}
	for _, ms := range append([][]*specs.Mount{f.Mounts}, f.capMountLists()...) {
		for _, m := range ms {
			out[m.ContainerPath] = m
		}
	}
	return out
}

// fileNames returns the file names f mounts, sorted: what a host gives a
// container whatever its layout.
func fileNames(f *Files) []string {
	var out []string
	for cp := range mountsOf(f) {
		out = append(out, path.Base(cp))
	}
	slices.Sort(out)
	return out
}

// TestDiscoverHostLayouts: a driver installed as a prefix on a read-only
// file system of its own (the H200 host of docs/hosts.md)
// and GKE's layout, whose libraries no linker cache lists, give a
// container every file a distribution's layout gives it: the ELF
// programs at /usr/bin (not the wrapper scripts there), the GSP firmware
// at /lib/firmware/nvidia/<version>, vdpau from lib64/ itself, the vendor
// files from /usr/share or the prefix's share/.
func TestDiscoverHostLayouts(t *testing.T) {
	standard, p := fullRoot(t)
	want, err := Discover(standard, standard, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	v := p.DriverVersion
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, root string, p *inventory.Profile)
		opts  []Option
		lib   string
		// readOnly: the prefix is a read-only file system.
		readOnly bool
		// from is where the host keeps each file the container gets at
		// the given path, under the root.
		from map[string]string
	}{
		{
			name:     "prefix on its own read-only file system",
			build:    func(t *testing.T, root string, p *inventory.Profile) { fakehost.BuildPrefix(t, root, p) },
			lib:      fakehost.Prefix + "/lib64",
			readOnly: true,
			from: map[string]string{
				"/usr/bin/nvidia-smi":                                       fakehost.Prefix + "/bin/nvidia-smi",
				"/usr/bin/nvidia-cuda-mps-control":                          fakehost.Prefix + "/bin/nvidia-cuda-mps-control",
				"/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin":              fakehost.Prefix + "/firmware/nvidia/" + v + "/gsp_ga10x.bin",
				fakehost.Prefix + "/lib64/libvdpau_nvidia.so." + v:          fakehost.Prefix + "/lib64/libvdpau_nvidia.so." + v,
				fakehost.Prefix + "/lib64/libcuda.so." + v:                  fakehost.Prefix + "/lib64/libcuda.so." + v,
				"/usr/share/vulkan/icd.d/nvidia_icd.json":                   "/usr/share/vulkan/icd.d/nvidia_icd.json",
				"/usr/share/vulkan/implicit_layer.d/nvidia_layers.json":     fakehost.Prefix + "/share/vulkan/implicit_layer.d/nvidia_layers.json",
				"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json": fakehost.Prefix + "/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
			},
		},
		{
			name: "GKE, found through a library search path",
			build: func(t *testing.T, root string, p *inventory.Profile) {
				if err := fakehost.BuildGKE(root, p); err != nil {
					t.Fatal(err)
				}
			},
			opts: []Option{WithLibrarySearchPaths(fakehost.GKEPrefix + "/lib64")},
			lib:  fakehost.GKEPrefix + "/lib64",
			from: map[string]string{
				"/usr/bin/nvidia-smi":                              fakehost.GKEPrefix + "/bin/nvidia-smi",
				"/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin":     "/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin",
				fakehost.GKEPrefix + "/lib64/libnvidia-ml.so." + v: fakehost.GKEPrefix + "/lib64/libnvidia-ml.so." + v,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.build(t, root, p)
			var st unix.Statfs_t
			if err := unix.Statfs(filepath.Join(root, path.Dir(tc.lib)), &st); err != nil {
				t.Fatal(err)
			}
			if got := st.Flags&unix.ST_RDONLY != 0; got != tc.readOnly {
				t.Fatalf("%s read-only: %v, want %v", path.Dir(tc.lib), got, tc.readOnly)
			}
			f, err := Discover(root, root, v, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Warnings) > 0 {
				t.Errorf("warnings: %q", f.Warnings)
			}
			if got, want := fileNames(f), fileNames(want); !slices.Equal(got, want) {
				t.Errorf("files mounted:\n got %q\nwant %q (as from a distribution's layout)", got, want)
			}
			mounts := mountsOf(f)
			for cp, hp := range tc.from {
				if m := mounts[cp]; m == nil || m.HostPath != filepath.Join(root, hp) {
					t.Errorf("%s: mounted %+v, want from %s", cp, m, filepath.Join(root, hp))
				}
			}
			if f.LibDirs[0] != tc.lib {
				t.Errorf("library folders %q, want %s first", f.LibDirs, tc.lib)
			}
			if !contains(f.Links, "libcuda.so."+v+"::"+tc.lib+"/libcuda.so.1") {
				t.Errorf("no SONAME link of libcuda in %s: %q", tc.lib, f.Links)
			}
			if nvml, err := FindLibrary(root, "libnvidia-ml.so.1", tc.opts...); err != nil || nvml != filepath.Join(root, tc.lib, "libnvidia-ml.so.1") {
				t.Errorf("FindLibrary(libnvidia-ml.so.1) = %s, %v", nvml, err)
			}
			if dirs := ProgramDirs(root, tc.opts...); dirs[0] != path.Join(path.Dir(tc.lib), "bin") {
				t.Errorf("ProgramDirs = %q, want the prefix's bin/ first", dirs)
			}
			ctl := path.Join(path.Dir(tc.lib), "bin/nvidia-cuda-mps-control")
			if got, err := FindBinary(root, "nvidia-cuda-mps-control", tc.opts...); err != nil || got != filepath.Join(root, ctl) {
				t.Errorf("FindBinary(nvidia-cuda-mps-control) = %s, %v; want %s", got, err, filepath.Join(root, ctl))
			}
		})
	}
}

// TestDiscoverGKEWithoutSearchPath: GKE's libraries, in no linker cache
// and no usual folder, are not found without the search path, and the
// error says which flag finds them.
func TestDiscoverGKEWithoutSearchPath(t *testing.T) {
	fakehost.RequireRoot(t, "a fake driver root has real device nodes (mknod)")
	p, err := inventory.LoadProfile("h100")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := fakehost.BuildGKE(root, p); err != nil {
		t.Fatal(err)
	}
	_, err = Discover(root, root, p.DriverVersion)
	if err == nil || !strings.Contains(err.Error(), "driver library libcuda.so."+p.DriverVersion+" not found under driver root") || !strings.Contains(err.Error(), "--library-search-path") {
		t.Errorf("err = %v, want libcuda not found, naming --library-search-path", err)
	}
	if _, err := FindLibrary(root, "libnvidia-ml.so.1"); err == nil || !strings.Contains(err.Error(), "--library-search-path") {
		t.Errorf("FindLibrary: err = %v, want one naming --library-search-path", err)
	}
}

// TestDiscoverPrograms: the spec hands a container the driver's ELF
// program, at /usr/bin: found in the bin/ of the prefix holding the
// libraries first, then in the usual folders; never a script, nor a
// program reached through a folder that links out of the driver root.
// FindBinary, which runs a program on the host, takes a script when no
// ELF program is there.
func TestDiscoverPrograms(t *testing.T) {
	const smi = "nvidia-smi"
	outside := t.TempDir()
	prog, err := fakehost.Program(smi)
	if err != nil {
		t.Fatal(err)
	}
	elf, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	script := []byte("#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n")
	for _, tc := range []struct {
		name   string
		layout func(t *testing.T, root string)
		mount  string // host path under the root; "" for no mount
		find   string // what FindBinary returns; "" for not found
	}{
		{"ELF in /usr/bin", func(t *testing.T, root string) {}, "/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"},
		{"a wrapper script in /usr/bin, the ELF in /usr/local/nvidia/bin", func(t *testing.T, root string) {
			put(t, root, "/usr/bin/nvidia-smi", script)
			put(t, root, "/usr/local/nvidia/bin/nvidia-smi", elf)
		}, "/usr/local/nvidia/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi"},
		{"a script alone", func(t *testing.T, root string) {
			put(t, root, "/usr/bin/nvidia-smi", script)
		}, "", "/usr/bin/nvidia-smi"},
		{"not executable", func(t *testing.T, root string) {
			if err := os.Chmod(filepath.Join(root, "/usr/bin/nvidia-smi"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "", ""},
		{"a link to the ELF elsewhere in the root", func(t *testing.T, root string) {
			put(t, root, "/opt/nvidia/bin/nvidia-smi", elf)
			os.Remove(filepath.Join(root, "/usr/bin/nvidia-smi"))
			link(t, root, "/usr/bin/nvidia-smi", "/opt/nvidia/bin/nvidia-smi")
		}, "/opt/nvidia/bin/nvidia-smi", "/opt/nvidia/bin/nvidia-smi"},
		{"a folder linking out of the root", func(t *testing.T, root string) {
			put(t, outside, "/bin/nvidia-smi", elf)
			os.Remove(filepath.Join(root, "/usr/bin/nvidia-smi"))
			link(t, root, "/usr/local/bin", filepath.Join(outside, "bin"))
		}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, p := fakeRoot(t, "h100")
			tc.layout(t, root)
			f, err := Discover(root, root, p.DriverVersion)
			if err != nil {
				t.Fatal(err)
			}
			m := mountsOf(f)["/usr/bin/nvidia-smi"]
			switch {
			case tc.mount == "" && m != nil:
				t.Errorf("mounted %s at /usr/bin/nvidia-smi, want nothing", m.HostPath)
			case tc.mount != "" && (m == nil || m.HostPath != filepath.Join(root, tc.mount)):
				t.Errorf("/usr/bin/nvidia-smi mounted as %+v, want from %s", m, filepath.Join(root, tc.mount))
			}
			got, err := FindBinary(root, smi)
			if tc.find == "" {
				if err == nil {
					t.Errorf("FindBinary = %s, want not found", got)
				}
				return
			}
			if err != nil || got != filepath.Join(root, tc.find) {
				t.Errorf("FindBinary = %s, %v; want %s", got, err, filepath.Join(root, tc.find))
			}
		})
	}
}

// TestDiscoverFirmware: the GSP firmware is taken from the first folder
// the kernel loads firmware from that has it: the firmware class path,
// then /lib/firmware/updates/<release>, /lib/firmware/updates,
// /lib/firmware/<release>, /lib/firmware; a container gets it at
// /lib/firmware/nvidia/<version>.
func TestDiscoverFirmware(t *testing.T) {
	const release = "6.18.0-gpuctk"
	for _, tc := range []struct {
		name      string
		classPath string // the firmware class path's content
		dirs      []string
		want      string
	}{
		{"/lib/firmware alone", "", nil, "/lib/firmware"},
		{"the running kernel's", "", []string{"/lib/firmware/" + release}, "/lib/firmware/" + release},
		{"another kernel's is not", "", []string{"/lib/firmware/5.15.0-1"}, "/lib/firmware"},
		{"updates", "", []string{"/lib/firmware/" + release, "/lib/firmware/updates"}, "/lib/firmware/updates"},
		{"updates of the running kernel", "", []string{"/lib/firmware/updates", "/lib/firmware/updates/" + release}, "/lib/firmware/updates/" + release},
		{"the class path first", "/usr/local/nvidia/firmware\n", []string{"/usr/local/nvidia/firmware", "/lib/firmware/updates"}, "/usr/local/nvidia/firmware"},
		{"a class path without it", "/usr/local/nvidia/firmware\n", []string{"/lib/firmware/updates"}, "/lib/firmware/updates"},
		{"an empty class path", "\n", nil, "/lib/firmware"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, p := fakeRoot(t, "h100")
			put(t, root, "/proc/sys/kernel/osrelease", []byte(release+"\n"))
			if tc.classPath != "" {
				put(t, root, firmwareClassPath, []byte(tc.classPath))
			}
			for _, d := range tc.dirs {
				put(t, root, path.Join(d, "nvidia", p.DriverVersion, "gsp_ga10x.bin"), []byte(d))
			}
			f, err := Discover(root, root, p.DriverVersion)
			if err != nil {
				t.Fatal(err)
			}
			at := "/lib/firmware/nvidia/" + p.DriverVersion + "/gsp_ga10x.bin"
			m := mountsOf(f)[at]
			want := filepath.Join(root, tc.want, "nvidia", p.DriverVersion, "gsp_ga10x.bin")
			if m == nil || m.HostPath != want || !slices.Contains(m.Options, "noexec") {
				t.Errorf("%s mounted as %+v, want from %s, noexec", at, m, want)
			}
		})
	}
}

// TestDiscoverFirmwareLink: a firmware file that is a link (absolute, as
// packages make them) is followed under the driver root, and the file it
// leads to mounted.
func TestDiscoverFirmwareLink(t *testing.T) {
	root, p := fakeRoot(t, "h100")
	at := "/lib/firmware/nvidia/" + p.DriverVersion + "/gsp_ga10x.bin"
	put(t, root, "/opt/nvidia/firmware/gsp_ga10x.bin", []byte("firmware"))
	link(t, root, at, "/opt/nvidia/firmware/gsp_ga10x.bin")
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	if m := mountsOf(f)[at]; m == nil || m.HostPath != filepath.Join(root, "/opt/nvidia/firmware/gsp_ga10x.bin") {
		t.Errorf("%s mounted as %+v, want from the file its link leads to", at, m)
	}
}

// put writes a file under root, making its folder.
func put(t *testing.T, root, p string, data []byte) {
	t.Helper()
	hp := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hp, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// link makes a symbolic link under root, making its folder.
func link(t *testing.T, root, p, target string) {
	t.Helper()
	hp := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(hp)
	if err := os.Symlink(target, hp); err != nil {
		t.Fatal(err)
	}
}
