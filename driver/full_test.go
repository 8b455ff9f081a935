package driver

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// TestDiscoverFull finds each capability's files in a full 580 install,
// and Standard lists the same files for a standard install.
// fullRoot returns a driver root holding every file of driver 580, for
// dgx-a100.
func fullRoot(t *testing.T) (string, *inventory.Profile) {
	t.Helper()
	fakehost.RequireRoot(t, "a fake driver root has real device nodes (mknod)")
	p, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := fakehost.BuildFull(root, p); err != nil {
		t.Fatal(err)
	}
	return root, p
}

func TestDiscoverFull(t *testing.T) {
	root, p := fullRoot(t)
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Warnings) > 0 {
		t.Errorf("warnings: %q", f.Warnings)
	}
	lib := "/usr/lib/x86_64-linux-gnu/"
	v := p.DriverVersion
	want := map[capability.Capability][]string{
		capability.Graphics: {lib + "libGLX_nvidia.so." + v, lib + "libEGL_nvidia.so." + v, lib + "libGLESv2_nvidia.so." + v, lib + "libGLESv1_CM_nvidia.so." + v,
			lib + "libnvidia-eglcore.so." + v, lib + "libnvidia-glcore.so." + v, lib + "libnvidia-glsi.so." + v, lib + "libnvidia-tls.so." + v,
			lib + "libnvidia-glvkspirv.so." + v, lib + "libnvidia-rtcore.so." + v, lib + "libnvoptix.so." + v, lib + "libnvidia-fbc.so." + v,
			lib + "libnvidia-vksc-core.so." + v, lib + "libnvidia-present.so." + v, lib + "libnvidia-wayland-client.so." + v, lib + "libnvidia-egl-wayland.so.1.1.19", lib + "libnvidia-egl-gbm.so.1.1.2",
			lib + "libnvidia-egl-xcb.so.1.0.1", lib + "libnvidia-egl-xlib.so.1.0.1",
			"/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
			"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json", "/usr/share/egl/egl_external_platform.d/20_nvidia_xcb.json",
			"/usr/share/egl/egl_external_platform.d/20_nvidia_xlib.json", "/usr/share/vulkan/icd.d/nvidia_icd.json",
			"/usr/share/vulkan/implicit_layer.d/nvidia_layers.json", "/usr/share/vulkansc/icd.d/nvidia_icd.json"},
		capability.Video:        {lib + "vdpau/libvdpau_nvidia.so." + v},
		capability.Display:      {"/usr/share/X11/xorg.conf.d/10-nvidia.conf", "/usr/lib/xorg/modules/drivers/nvidia_drv.so", "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so." + v},
		capability.NGX:          {lib + "libnvidia-ngx.so." + v, lib + "nvidia/wine/nvngx.dll", lib + "nvidia/wine/_nvngx.dll"},
		capability.OptiX:        {"/usr/share/nvidia/nvoptix.bin"},
		capability.PKCS11:       {lib + "libnvidia-pkcs11.so." + v, lib + "libnvidia-pkcs11-openssl3.so." + v},
		capability.SandboxUtils: {lib + "libnvidia-sandboxutils.so." + v, "/usr/share/nvidia/files.d/sandboxutils-filelist.json"},
	}
	std := Standard(v, p.UVMMajor, p.CapsMajor)
	for _, c := range capability.Extra() {
		var got, gotStd []string
		for _, m := range f.CapabilityMounts[c] {
			got = append(got, m.ContainerPath)
			if m.HostPath != filepath.Join(root, m.ContainerPath) {
				t.Errorf("%s: mount %+v not from the root", c, m)
			}
		}
		for _, m := range std.CapabilityMounts[c] {
			gotStd = append(gotStd, m.ContainerPath)
		}
		if !reflect.DeepEqual(got, want[c]) {
			t.Errorf("%s mounts:\n got %q\nwant %q", c, got, want[c])
		}
		// Standard knows every path; the EGL platform libraries' own
		// versions stand for whatever the install has.
		if len(gotStd) < len(want[c]) {
			t.Errorf("Standard %s mounts: %q, fewer than %q", c, gotStd, want[c])
		}
	}
	for _, l := range []string{
		"libGLX_nvidia.so." + v + "::" + lib + "libGLX_nvidia.so.0",
		"libGLX_nvidia.so.0::" + lib + "libGLX_indirect.so.0",
		"../libnvidia-allocator.so.1::" + lib + "gbm/nvidia-drm_gbm.so",
		"libvdpau_nvidia.so." + v + "::" + lib + "vdpau/libvdpau_nvidia.so.1",
		"libglxserver_nvidia.so." + v + "::/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so",
		"libnvidia-fbc.so.1::" + lib + "libnvidia-fbc.so",
	} {
		if !contains(f.Links, l) || !contains(std.Links, l) {
			t.Errorf("link %s missing: discovered %v, standard %v", l, contains(f.Links, l), contains(std.Links, l))
		}
	}
	if l := "libnvidia-egl-wayland.so.1.1.19::" + lib + "libnvidia-egl-wayland.so.1"; !contains(f.Links, l) {
		t.Errorf("link %s missing", l)
	}
	if !contains(f.LibDirs, lib+"vdpau") || !contains(std.LibDirs, lib+"vdpau") {
		t.Errorf("lib dirs %v (standard %v) lack vdpau", f.LibDirs, std.LibDirs)
	}
	var common []string
	for _, m := range f.Mounts {
		common = append(common, m.ContainerPath)
	}
	for _, m := range []string{"/etc/OpenCL/vendors/nvidia.icd", "/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex-ctl", lib + "libnvcuvid.so." + v} {
		if !contains(common, m) {
			t.Errorf("common mounts lack %s: %v", m, common)
		}
	}
	for _, g := range p.GPUs {
		nodes, links, err := f.DRI(g.Minor, g.PCIBusID)
		if err != nil {
			t.Fatal(err)
		}
		stdNodes, stdLinks, _ := std.DRI(g.Minor, g.PCIBusID)
		var got []string
		for i, n := range nodes {
			got = append(got, n.Path)
			if n.Major != 226 || n.Type != "c" || n.Minor != stdNodes[i].Minor {
				t.Errorf("DRI node %+v, standard %+v", n, stdNodes[i])
			}
		}
		sort.Strings(got)
		bus := fakehost.SysfsBusID(g.PCIBusID)
		wantNodes := []string{"/dev/dri/" + fakehost.DRMCard(g.Minor), "/dev/dri/" + fakehost.DRMRender(g.Minor)}
		wantLinks := []string{"../" + fakehost.DRMCard(g.Minor) + "::/dev/dri/by-path/pci-" + bus + "-card", "../" + fakehost.DRMRender(g.Minor) + "::/dev/dri/by-path/pci-" + bus + "-render"}
		if !reflect.DeepEqual(got, wantNodes) || !reflect.DeepEqual(links, wantLinks) || !reflect.DeepEqual(stdLinks, wantLinks) {
			t.Errorf("GPU %d DRI: nodes %v links %v (standard %v)\nwant %v, %v", g.Minor, got, links, stdLinks, wantNodes, wantLinks)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDataFileChecks: a vendor file that is not what it should be is left
// out with a warning naming it; one naming a library elsewhere is linked.
func TestDataFileChecks(t *testing.T) {
	icd := func(lib string) string { return `{"ICD": {"library_path": "` + lib + `"}}` }
	lib := "/usr/lib/x86_64-linux-gnu/"
	tests := []struct {
		name, content string
		check         check
		warn          string // substring of the warning; "" none
		link          string // link added
	}{
		{name: "bare SONAME", content: icd("libGLX_nvidia.so.0"), check: icdJSON},
		{name: "absolute, where it is mounted", content: icd(lib + "libGLX_nvidia.so.0"), check: icdJSON},
		{name: "absolute under another driver root", content: icd("/run/nvidia/driver" + lib + "libGLX_nvidia.so.0"), check: icdJSON,
			link: lib + "libGLX_nvidia.so.0::/run/nvidia/driver" + lib + "libGLX_nvidia.so.0"},
		{name: "unknown library", content: icd("libvulkan_other.so.1"), check: icdJSON, warn: "does not provide"},
		{name: "not JSON", content: "ICD = libGLX", check: icdJSON, warn: "not a JSON object"},
		{name: "no ICD member", content: `{"layer": {"library_path": "libGLX_nvidia.so.0"}}`, check: icdJSON, warn: `no "ICD"`},
		{name: "layer", content: `{"layer": {"library_path": "libGLX_nvidia.so.0"}}`, check: layerJSON},
		{name: "too large", content: `{"ICD": {"library_path": "libGLX_nvidia.so.0"}, "x": "` + strings.Repeat("a", maxDataFile) + `"}`, check: icdJSON, warn: "larger than 64 KiB"},
		{name: "OpenCL vendor", content: "libnvidia-opencl.so.1\n", check: libraryName},
		{name: "OpenCL vendor, two lines", content: "libnvidia-opencl.so.1\nlibx.so\n", check: libraryName, warn: "one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, "f.json")
			writeFile(t, p, tt.content)
			f := &Files{Libraries: []string{lib + "libGLX_nvidia.so.0", lib + "libnvidia-opencl.so.1"}}
			var warn string
			l, err := checkDataFile(p, tt.check)
			if err == nil {
				err = f.fixLibraryPath(l, map[string]string{"libGLX_nvidia.so.0": lib + "libGLX_nvidia.so.0", "libnvidia-opencl.so.1": lib + "libnvidia-opencl.so.1"})
			}
			if err != nil {
				warn = err.Error()
			}
			if (tt.warn == "") != (warn == "") || !strings.Contains(warn, tt.warn) {
				t.Errorf("warning %q, want one with %q", warn, tt.warn)
			}
			if tt.link != "" && !reflect.DeepEqual(f.Links, []string{tt.link}) || tt.link == "" && len(f.Links) > 0 {
				t.Errorf("links %q, want %q", f.Links, tt.link)
			}
		})
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDataFileFIFO: a FIFO in a vendor file's place costs no wait.
func TestDataFileFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nvidia_icd.json")
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkDataFile(p, icdJSON); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: %v", err)
	}
}

// TestDataFileLinks: a data file that is a link (Debian puts Xorg's
// nvidia_drv.so and vendor files behind /etc/alternatives, absolute
// links) is followed under the driver root and the file it leads to
// mounted at the usual path; a link leading nowhere is left out.
func TestDataFileLinks(t *testing.T) {
	root, p := fullRoot(t)
	move := func(from, to string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, to)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(root, from), filepath.Join(root, to)); err != nil {
			t.Fatal(err)
		}
		alt := "/etc/alternatives/" + filepath.Base(from)
		os.MkdirAll(filepath.Join(root, "etc/alternatives"), 0o755)
		if err := os.Symlink(to, filepath.Join(root, alt)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(alt, filepath.Join(root, from)); err != nil {
			t.Fatal(err)
		}
	}
	const drv, icd = "/usr/lib/xorg/modules/drivers/nvidia_drv.so", "/usr/share/vulkan/icd.d/nvidia_icd.json"
	move(drv, "/usr/lib/nvidia/current/nvidia_drv.so")
	move(icd, "/usr/lib/nvidia/current/nvidia_icd.json")
	const opencl = "/etc/OpenCL/vendors/nvidia.icd"
	os.Remove(filepath.Join(root, opencl))
	if err := os.Symlink("/nonexistent/nvidia.icd", filepath.Join(root, opencl)); err != nil {
		t.Fatal(err)
	}
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Warnings) > 0 {
		t.Errorf("warnings: %q", f.Warnings)
	}
	got := map[string]string{}
	for _, ms := range append([][]*specs.Mount{f.Mounts}, f.capMountLists()...) {
		for _, m := range ms {
			got[m.ContainerPath] = m.HostPath
		}
	}
	for cp, hp := range map[string]string{drv: "/usr/lib/nvidia/current/nvidia_drv.so", icd: "/usr/lib/nvidia/current/nvidia_icd.json"} {
		if got[cp] != filepath.Join(root, hp) {
			t.Errorf("%s mounted from %q, want the file its links lead to, %s", cp, got[cp], filepath.Join(root, hp))
		}
	}
	if h, ok := got[opencl]; ok {
		t.Errorf("%s, a link leading nowhere, mounted from %s", opencl, h)
	}
}

// TestDRIPCIDomains finds each GPU's DRM nodes through sysfs by the bus id
// the kernel gives it, the domain printed with %04x: a GPU on domain
// 0x10000 (VMD, or hosts with many root complexes) is 10000:01:00.0 there,
// not 0000:01:00.0, which is another GPU's.
func TestDRIPCIDomains(t *testing.T) {
	root, p := fakeRoot(t, "l40s")
	gpus := []struct {
		nvml, sysfs string
	}{
		{"00000000:01:00.0", "0000:01:00.0"},
		{"00010000:01:00.0", "10000:01:00.0"},
		{"00000001:01:00.0", "0001:01:00.0"},
		{"0001A3F0:E1:00.0", "1a3f0:e1:00.0"},
	}
	for minor, g := range gpus {
		for _, name := range []string{fmt.Sprintf("card%d", minor+1), fmt.Sprintf("renderD%d", 128+minor)} {
			if err := os.MkdirAll(filepath.Join(root, "sys/bus/pci/devices", g.sysfs, "drm", name), 0o755); err != nil {
				t.Fatal(err)
			}
			n := filepath.Join(root, "dev/dri", name)
			os.MkdirAll(filepath.Dir(n), 0o755)
			dev := minor + 1
			if strings.HasPrefix(name, "renderD") {
				dev = 128 + minor
			}
			if err := unix.Mknod(n, unix.S_IFCHR|0o666, int(unix.Mkdev(226, uint32(dev)))); err != nil {
				t.Fatal(err)
			}
		}
	}
	f, err := Discover(root, root, p.DriverVersion)
	if err != nil {
		t.Fatal(err)
	}
	for minor, g := range gpus {
		nodes, links, err := f.DRI(minor, g.nvml)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range nodes {
			got = append(got, fmt.Sprintf("%s %d:%d", n.Path, n.Major, n.Minor))
		}
		sort.Strings(got)
		want := []string{fmt.Sprintf("/dev/dri/card%d 226:%d", minor+1, minor+1), fmt.Sprintf("/dev/dri/renderD%d 226:%d", 128+minor, 128+minor)}
		wantLinks := []string{
			fmt.Sprintf("../card%d::/dev/dri/by-path/pci-%s-card", minor+1, g.sysfs),
			fmt.Sprintf("../renderD%d::/dev/dri/by-path/pci-%s-render", 128+minor, g.sysfs),
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(links, wantLinks) {
			t.Errorf("GPU %s: nodes %q, links %q\nwant %q, %q", g.nvml, got, links, want, wantLinks)
		}
	}
	// No PCI bus id, or a path in its place: no sysfs lookup, no nodes.
	for _, id := range []string{"", "../../../../dev/dri", "00000000:01:00.0/.."} {
		if nodes, links, err := f.DRI(0, id); err != nil || len(nodes) > 0 || len(links) > 0 {
			t.Errorf("DRI(%q) = %v, %q, %v; want nothing", id, nodes, links, err)
		}
	}
}

// TestVulkanProducer: drivers up to 545 ship libnvidia-vulkan-producer,
// which their GL and EGL cores dlopen by its unversioned name. A 535
// install's is a graphics file, mounted with capability-graphics, with
// the .so link the installer ships and a linker cache entry for that
// name; a 580 install has none, and Standard lists it only up to 545.
func TestVulkanProducer(t *testing.T) {
	const v = "535.247.01"
	lib := "/usr/lib/x86_64-linux-gnu/"
	fakehost.RequireRoot(t, "a fake driver root has real device nodes (mknod)")
	p, err := inventory.LoadProfile("p100")
	if err != nil {
		t.Fatal(err)
	}
	if p.DriverVersion != v {
		t.Fatalf("profile p100 has driver %s, the test wants %s", p.DriverVersion, v)
	}
	root := t.TempDir()
	if err := fakehost.Build(root, p); err != nil {
		t.Fatal(err)
	}
	// As the .run installer puts it: the file, its SONAME being its own
	// name, and the unversioned link beside it.
	obj, err := fakehost.SharedObject("libnvidia-vulkan-producer.so." + v)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, lib, "libnvidia-vulkan-producer.so."+v), string(data))
	if err := os.Symlink("libnvidia-vulkan-producer.so."+v, filepath.Join(root, lib, "libnvidia-vulkan-producer.so")); err != nil {
		t.Fatal(err)
	}
	run(t, "ldconfig", "-r", root)

	f, err := Discover(root, root, v)
	if err != nil {
		t.Fatal(err)
	}
	std := Standard(v, p.UVMMajor, p.CapsMajor)
	file := lib + "libnvidia-vulkan-producer.so." + v
	link := "libnvidia-vulkan-producer.so." + v + "::" + lib + "libnvidia-vulkan-producer.so"
	for name, f := range map[string]*Files{"discovered": f, "standard": std} {
		var graphics []string
		for _, m := range f.CapabilityMounts[capability.Graphics] {
			graphics = append(graphics, m.ContainerPath)
		}
		if !contains(graphics, file) {
			t.Errorf("%s: graphics mounts %q lack %s", name, graphics, file)
		}
		for _, m := range f.Mounts {
			if m.ContainerPath == file {
				t.Errorf("%s: %s in the common edits, want it with capability-graphics alone", name, file)
			}
		}
		if !contains(f.Links, link) {
			t.Errorf("%s: no link %s", name, link)
		}
		for _, l := range []string{file, lib + "libnvidia-vulkan-producer.so"} {
			if !contains(f.Libraries, l) {
				t.Errorf("%s: %s not in the linker cache's libraries", name, l)
			}
		}
	}

	// Drivers from 550 on have none: Standard lists none, and a full 580
	// install (TestDiscoverFull lists its graphics files) has none to find.
	for _, version := range []string{"550.54.14", "580.65.06"} {
		for _, l := range Standard(version, 510, 511).Links {
			if strings.Contains(l, "vulkan-producer") {
				t.Errorf("Standard(%s) links %s", version, l)
			}
		}
	}
}
