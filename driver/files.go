package driver

import (
	"fmt"
	"path"
	"strings"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/internal/pcibus"
)

// Files is what a container needs from the driver, beyond the nodes of the
// devices it is given.
type Files struct {
	// Version is the driver version the libraries match.
	Version string
	// ControlNodes are /dev/nvidiactl, /dev/nvidia-uvm, … present on the host.
	ControlNodes []*specs.DeviceNode
	// Mounts are the compute and utility files (libraries, binaries,
	// firmware, sockets, the OpenCL vendor file), each at the same path in
	// the container as under the driver root: the spec's common edits.
	Mounts []*specs.Mount
	// CapabilityMounts are the files of every other capability present
	// (graphics, video, display, ...): each becomes a capability device.
	CapabilityMounts map[capability.Capability][]*specs.Mount
	// Links are the symbolic links the hook creates in the container, as
	// "target::link" with the link's absolute path (SONAME and .so links),
	// for every capability: the hook makes a link only when its target is
	// in the container, so a capability's links appear with its device.
	Links []string
	// LibDirs are the container folders holding the driver's libraries
	// (vdpau/ too), every capability's.
	LibDirs []string
	// Libraries are the container paths the linker cache must map each
	// library's SONAME to: the SONAME link, or the file when the SONAME is
	// the file's own name.
	Libraries []string
	// Linked are the files Gather moved into folder mounts: the hook
	// links each one's usual path into its folder.
	Linked []LinkedFile
	// Whole are the host folders Gather mounts whole: the driver's own
	// folders that hold nothing else (a prefix such as /usr/local/nvidia).
	Whole []string
	// OneByOne counts the regular files of the driver Gather left in a
	// mount each (no folder could take them).
	OneByOne int
	// Warnings say which files were found but left out, and why (a vendor
	// JSON file that does not parse, or names a library the driver lacks).
	Warnings []string

	nodes nodeSource
}

// nodeSource finds device nodes: on a host by stat, on a simulated host
// from the standard numbering.
type nodeSource interface {
	node(path string) (*specs.DeviceNode, error)
	capMinor(gpuMinor, gi, ci int) (int, error)
	// drm names the DRM nodes of a GPU ("card1", "renderD128"); none
	// when the nvidia-drm module is not loaded.
	drm(gpuMinor int, busID string) ([]string, error)
}

// GPUNode returns the node of the GPU with the given minor, /dev/nvidiaN.
func (f *Files) GPUNode(minor int) (*specs.DeviceNode, error) {
	return f.nodes.node(fmt.Sprintf("/dev/nvidia%d", minor))
}

// MIGNodes returns the capability nodes that give access to a MIG device:
// its GPU instance's and its compute instance's access nodes.
func (f *Files) MIGNodes(gpuMinor, gi, ci int) ([]*specs.DeviceNode, error) {
	var out []*specs.DeviceNode
	for _, c := range []int{-1, ci} {
		minor, err := f.nodes.capMinor(gpuMinor, gi, c)
		if err != nil {
			return nil, err
		}
		n, err := f.nodes.node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// library is a driver library as the standard layout knows it: its base
// name and the SONAME the driver gives it ("" when the SONAME is the file
// name itself, as for libnvidia-gpucomp).
type library struct {
	cap    capability.Capability
	base   string
	soname string
	// devLink adds base.so -> SONAME (the file itself when the SONAME is
	// its own name), which some applications dlopen.
	devLink  bool
	required bool
	// dir is the sub-folder of a library folder it lives in (vdpau).
	dir string
	// suffix is the file's version suffix when it is not the driver's
	// (the EGL platform libraries have their own: .so.1.1.19); a glob.
	suffix string
	// lastBranch is the last driver branch that ships it, 0 while the
	// driver still does: Standard leaves it out of later versions'
	// installs (discovery finds whatever the install has).
	lastBranch int
}

// libraries are the driver's libraries by capability, as the driver's
// packages (and its .run installer) ship them: the SONAME each has, and
// whether a .so development link comes with it. Compute and utility go in
// the spec's common edits; so do the video codec libraries (nvcuvid,
// encode, opticalflow), which CUDA programs link and the common edits
// have always carried.
var libraries = []library{
	{cap: capability.Compute, base: "libcuda", soname: "libcuda.so.1", devLink: true, required: true},
	{cap: capability.Compute, base: "libcudadebugger", soname: "libcudadebugger.so.1", devLink: true},
	{cap: capability.Utility, base: "libnvidia-ml", soname: "libnvidia-ml.so.1", devLink: true, required: true},
	{cap: capability.Compute, base: "libnvidia-ptxjitcompiler", soname: "libnvidia-ptxjitcompiler.so.1", devLink: true},
	{cap: capability.Compute, base: "libnvidia-nvvm", soname: "libnvidia-nvvm.so.4", devLink: true},
	{cap: capability.Compute, base: "libnvidia-opencl", soname: "libnvidia-opencl.so.1"},
	{cap: capability.Compute, base: "libnvidia-gpucomp"},
	{cap: capability.Compute, base: "libnvidia-allocator", soname: "libnvidia-allocator.so.1", devLink: true},
	{cap: capability.Utility, base: "libnvidia-cfg", soname: "libnvidia-cfg.so.1", devLink: true},
	{cap: capability.Compute, base: "libnvidia-opticalflow", soname: "libnvidia-opticalflow.so.1", devLink: true},
	{cap: capability.Compute, base: "libnvcuvid", soname: "libnvcuvid.so.1", devLink: true},
	{cap: capability.Compute, base: "libnvidia-encode", soname: "libnvidia-encode.so.1", devLink: true},
	{cap: capability.Video, base: "libvdpau_nvidia", soname: "libvdpau_nvidia.so.1", dir: "vdpau", devLink: true},
	{cap: capability.Graphics, base: "libGLX_nvidia", soname: "libGLX_nvidia.so.0"},
	{cap: capability.Graphics, base: "libEGL_nvidia", soname: "libEGL_nvidia.so.0"},
	{cap: capability.Graphics, base: "libGLESv2_nvidia", soname: "libGLESv2_nvidia.so.2"},
	{cap: capability.Graphics, base: "libGLESv1_CM_nvidia", soname: "libGLESv1_CM_nvidia.so.1"},
	{cap: capability.Graphics, base: "libnvidia-eglcore"},
	{cap: capability.Graphics, base: "libnvidia-glcore"},
	{cap: capability.Graphics, base: "libnvidia-glsi"},
	{cap: capability.Graphics, base: "libnvidia-tls"},
	{cap: capability.Graphics, base: "libnvidia-glvkspirv"},
	{cap: capability.Graphics, base: "libnvidia-rtcore"},
	{cap: capability.Graphics, base: "libnvoptix", soname: "libnvoptix.so.1"},
	{cap: capability.Graphics, base: "libnvidia-fbc", soname: "libnvidia-fbc.so.1", devLink: true},
	{cap: capability.Graphics, base: "libnvidia-vksc-core", soname: "libnvidia-vksc-core.so.1"},
	// Vulkan's producer library (Vulkan on Wayland), shipped by drivers
	// up to 545 (from 495 at least): the GL and EGL cores dlopen it by its
	// unversioned name, the link the installer ships beside it.
	{cap: capability.Graphics, base: "libnvidia-vulkan-producer", devLink: true, lastBranch: 545},
	// Vulkan's presentation helpers (Wayland WSI), which the Vulkan driver
	// loads by file name.
	{cap: capability.Graphics, base: "libnvidia-present"},
	{cap: capability.Graphics, base: "libnvidia-wayland-client"},
	{cap: capability.Graphics, base: "libnvidia-egl-wayland", soname: "libnvidia-egl-wayland.so.1", suffix: "1.*.*"},
	{cap: capability.Graphics, base: "libnvidia-egl-gbm", soname: "libnvidia-egl-gbm.so.1", suffix: "1.*.*"},
	{cap: capability.Graphics, base: "libnvidia-egl-xcb", soname: "libnvidia-egl-xcb.so.1", suffix: "1.*.*"},
	{cap: capability.Graphics, base: "libnvidia-egl-xlib", soname: "libnvidia-egl-xlib.so.1", suffix: "1.*.*"},
	{cap: capability.NGX, base: "libnvidia-ngx", soname: "libnvidia-ngx.so.1"},
	{cap: capability.PKCS11, base: "libnvidia-pkcs11"},
	{cap: capability.PKCS11, base: "libnvidia-pkcs11-openssl3"},
	{cap: capability.SandboxUtils, base: "libnvidia-sandboxutils", soname: "libnvidia-sandboxutils.so.1"},
}

// graphicsLinks are the links glvnd and GBM look for that are not a
// library's own SONAME or .so link, relative to the library folder: the
// GLX indirect-rendering fallback and GBM's backend (Mesa's libgbm loads
// gbm/<drm driver>_gbm.so). Each is made only when its target is there.
var graphicsLinks = []string{
	"libGLX_nvidia.so.0::libGLX_indirect.so.0",
	"../libnvidia-allocator.so.1::gbm/nvidia-drm_gbm.so",
}

// binaries are the driver's programs a container may run.
var binaries = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-imex", "nvidia-imex-ctl"}

// sockets are the driver daemons' sockets a container may talk to.
var sockets = []string{"/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket"}

// Mount options, by kind of mount (tests/mounts_test.go checks each from
// inside a container). Every mount is read-only, so a container cannot
// change the host's driver (nor every other container's); nosuid, so a
// setuid bit on a host file gives no privilege inside; nodev, so devices
// reach a container only as the spec's device nodes, which the runtime
// also allows in the device cgroup.
var (
	// fileOptions are the libraries' and programs' mounts. They must stay
	// executable: execve needs it of a program, and the dynamic loader
	// maps a library's code with mmap(PROT_EXEC), which a noexec mount
	// refuses (EPERM). A file has no submounts: bind, not rbind.
	fileOptions = []string{"ro", "nosuid", "nodev", "bind"}
	// firmwareOptions are the GSP firmware's: data, never run.
	firmwareOptions = []string{"ro", "nosuid", "nodev", "noexec", "bind"}
	// socketOptions are the driver daemons' sockets'. Read-only does not
	// stop clients: connect(2) checks write permission on the socket's
	// inode, and the kernel refuses writes on a read-only mount only to
	// regular files, folders and links.
	socketOptions = []string{"ro", "nosuid", "nodev", "noexec", "bind"}
	// folderOptions are for a folder mount: rbind takes the folder's
	// submounts along (a bind alone would show the empty mount points
	// under them), and rprivate keeps mounts made later under the host's
	// folder from propagating into running containers, and the container's
	// from reaching the host.
	folderOptions = []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
)

// addLibrary records a library file found at containerPath (hostPath on
// the host), with the links its SONAME and .so name need.
func (f *Files) addLibrary(l library, hostPath, containerPath, soname string) {
	f.add(l.cap, &specs.Mount{HostPath: hostPath, ContainerPath: containerPath, Options: fileOptions})
	dir, file := path.Split(containerPath)
	dir = path.Clean(dir)
	if soname == "" {
		soname = file
	}
	f.Libraries = append(f.Libraries, path.Join(dir, soname))
	if soname != file {
		f.Links = append(f.Links, file+"::"+path.Join(dir, soname))
	}
	if dev := l.base + ".so"; l.devLink && dev != soname {
		f.Links = append(f.Links, soname+"::"+path.Join(dir, dev))
		f.Libraries = append(f.Libraries, path.Join(dir, dev))
	}
	for _, d := range f.LibDirs {
		if d == dir {
			return
		}
	}
	f.LibDirs = append(f.LibDirs, dir)
}

// add records a mount of a capability's file.
func (f *Files) add(c capability.Capability, m *specs.Mount) {
	if c == capability.Compute || c == capability.Utility {
		f.Mounts = append(f.Mounts, m)
		return
	}
	if f.CapabilityMounts == nil {
		f.CapabilityMounts = map[capability.Capability][]*specs.Mount{}
	}
	f.CapabilityMounts[c] = append(f.CapabilityMounts[c], m)
}

// DRI returns a GPU's DRM nodes (/dev/dri/cardN, /dev/dri/renderDN) and
// the by-path links udev makes for them, as "target::link"; none when the
// host has no DRM device for the GPU (nvidia-drm not loaded).
func (f *Files) DRI(gpuMinor int, busID string) ([]*specs.DeviceNode, []string, error) {
	names, err := f.nodes.drm(gpuMinor, busID)
	if err != nil {
		return nil, nil, err
	}
	var nodes []*specs.DeviceNode
	var links []string
	bus, hasBus := pcibus.Sysfs(busID)
	for _, name := range names {
		n, err := f.nodes.node("/dev/dri/" + name)
		if err != nil {
			return nil, nil, fmt.Errorf("GPU %s: %w", busID, err)
		}
		nodes = append(nodes, n)
		kind := "card"
		if strings.HasPrefix(name, "renderD") {
			kind = "render"
		}
		if !hasBus {
			continue // no PCI address known: udev would make no by-path link either
		}
		links = append(links, fmt.Sprintf("../%s::/dev/dri/by-path/pci-%s-%s", name, bus, kind))
	}
	return nodes, links, nil
}
