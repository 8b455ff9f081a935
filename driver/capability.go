package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"
)

// Capability is a driver capability, as NVIDIA_DRIVER_CAPABILITIES names
// it: which of the driver's files a container gets.
type Capability string

// The driver capabilities. Compute and utility are every container's (the
// spec's common edits); each other one is a device of its own.
const (
	Compute      Capability = "compute"
	Utility      Capability = "utility"
	Video        Capability = "video"
	Graphics     Capability = "graphics"
	Display      Capability = "display"
	NGX          Capability = "ngx"
	OptiX        Capability = "optix"
	PKCS11       Capability = "pkcs11"
	SandboxUtils Capability = "sandboxutils"
)

// DevicePrefix starts the names of the capability devices in the spec:
// capability-graphics, capability-video, ... ("all" is each of them).
const DevicePrefix = "capability-"

// Device returns the name of a capability's device in the spec.
func (c Capability) Device() string { return DevicePrefix + string(c) }

// Extra returns the capabilities beyond compute and utility, in the order
// the spec lists their devices.
func Extra() []Capability {
	return []Capability{Graphics, Video, Display, NGX, OptiX, PKCS11, SandboxUtils}
}

// Devices returns the capability devices a list of capability names, as
// NVIDIA_DRIVER_CAPABILITIES spells them, asks for, each once and in the
// list's order, and the names that are no capability. Compute and utility
// ask for none (they are every container's); "all" asks for every one,
// in Extra's order, whatever else the list holds.
func Devices(names []string) (devices, unknown []string) {
	known := map[string]bool{}
	for _, c := range Extra() {
		known[string(c)] = true
	}
	for _, n := range names {
		switch {
		case n == "" || n == string(Compute) || n == string(Utility):
		case n == "all":
			devices = devices[:0]
			for _, c := range Extra() {
				devices = append(devices, c.Device())
			}
			return devices, nil
		case !known[n]:
			if !slices.Contains(unknown, n) {
				unknown = append(unknown, n)
			}
		case !slices.Contains(devices, Capability(n).Device()):
			devices = append(devices, Capability(n).Device())
		}
	}
	return devices, unknown
}

// check is how a data file's content is checked before it is mounted.
type check int

const (
	anyContent  check = iota
	icdJSON           // {"ICD": {"library_path": ...}}: Vulkan, glvnd EGL vendor, EGL external platform
	layerJSON         // {"layer": {"library_path": ...}}: a Vulkan implicit layer
	jsonObject        // any JSON object
	libraryName       // one line naming a library: an OpenCL vendor file
)

// dataFile is a file of the driver that is not a library: a vendor JSON
// file, an X11 snippet, an Xorg module, a data blob. paths are where
// installs put it, the first found wins; "%v" is the driver version.
type dataFile struct {
	cap   Capability
	paths []string
	check check
	// link is a link next to it, "target::name", that the packages ship
	// (the Xorg GLX module's unversioned name).
	link string
}

// dataFiles are the driver's other files, by capability. The Xorg modules
// are in the xorg module folders, which Xorg loads by path: they are not
// libraries for the linker cache.
var dataFiles = []dataFile{
	{cap: Compute, paths: []string{"/etc/OpenCL/vendors/nvidia.icd"}, check: libraryName},
	{cap: Graphics, paths: []string{"/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/etc/glvnd/egl_vendor.d/10_nvidia.json"}, check: icdJSON},
	{cap: Graphics, paths: []string{"/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json", "/etc/egl/egl_external_platform.d/10_nvidia_wayland.json"}, check: icdJSON},
	{cap: Graphics, paths: []string{"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json", "/etc/egl/egl_external_platform.d/15_nvidia_gbm.json"}, check: icdJSON},
	{cap: Graphics, paths: []string{"/usr/share/egl/egl_external_platform.d/20_nvidia_xcb.json", "/etc/egl/egl_external_platform.d/20_nvidia_xcb.json"}, check: icdJSON},
	{cap: Graphics, paths: []string{"/usr/share/egl/egl_external_platform.d/20_nvidia_xlib.json", "/etc/egl/egl_external_platform.d/20_nvidia_xlib.json"}, check: icdJSON},
	{cap: Graphics, paths: []string{"/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json"}, check: icdJSON},
	{cap: Graphics, paths: []string{"/usr/share/vulkan/implicit_layer.d/nvidia_layers.json", "/etc/vulkan/implicit_layer.d/nvidia_layers.json"}, check: layerJSON},
	{cap: Graphics, paths: []string{"/usr/share/vulkansc/icd.d/nvidia_icd.json", "/etc/vulkansc/icd.d/nvidia_icd.json"}, check: icdJSON},
	{cap: Display, paths: []string{"/usr/share/X11/xorg.conf.d/10-nvidia.conf", "/etc/X11/xorg.conf.d/10-nvidia.conf"}},
	{cap: Display, paths: []string{"/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf", "/etc/X11/xorg.conf.d/nvidia-drm-outputclass.conf"}},
	{cap: Display, paths: []string{"/usr/lib/xorg/modules/drivers/nvidia_drv.so", "/usr/lib64/xorg/modules/drivers/nvidia_drv.so", "/usr/lib/x86_64-linux-gnu/nvidia/xorg/nvidia_drv.so"}},
	{cap: Display, paths: []string{"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.%v", "/usr/lib64/xorg/modules/extensions/libglxserver_nvidia.so.%v", "/usr/lib/x86_64-linux-gnu/nvidia/xorg/libglxserver_nvidia.so.%v"},
		link: "libglxserver_nvidia.so.%v::libglxserver_nvidia.so"},
	{cap: OptiX, paths: []string{"/usr/share/nvidia/nvoptix.bin"}},
	{cap: NGX, paths: []string{"/usr/lib/x86_64-linux-gnu/nvidia/wine/nvngx.dll", "/usr/lib64/nvidia/wine/nvngx.dll"}},
	{cap: NGX, paths: []string{"/usr/lib/x86_64-linux-gnu/nvidia/wine/_nvngx.dll", "/usr/lib64/nvidia/wine/_nvngx.dll"}},
	{cap: SandboxUtils, paths: []string{"/usr/share/nvidia/files.d/sandboxutils-filelist.json"}, check: jsonObject},
}

// maxDataFile caps what is read of a file to check: the driver's JSON files
// are under 1 KiB.
const maxDataFile = 64 << 10

// findDataFiles adds the data files found under the root, each checked.
// A JSON file that does not parse, or names a library this install does
// not provide, is left out with a warning: mounted, it would make the
// loader that reads it fail in the container.
func (f *Files) findDataFiles(r Root) {
	provided := map[string]string{} // SONAME or file name -> container path
	for _, l := range f.Libraries {
		provided[path.Base(l)] = l
	}
	for _, mounts := range append([][]*specs.Mount{f.Mounts}, f.capMountLists()...) {
		for _, m := range mounts {
			provided[path.Base(m.ContainerPath)] = m.ContainerPath
		}
	}
	for _, d := range dataFiles {
		for _, p := range d.paths {
			p = strings.ReplaceAll(p, "%v", f.Version)
			hp := r.Join(p)
			if !isRegular(hp) {
				continue
			}
			if d.check != anyContent {
				lib, err := checkDataFile(hp, d.check)
				if err == nil {
					err = f.fixLibraryPath(lib, provided)
				}
				if err != nil {
					f.Warnings = append(f.Warnings, fmt.Sprintf("%s left out: %v", hp, err))
					break
				}
			}
			f.add(d.cap, &specs.Mount{HostPath: hp, ContainerPath: p, Options: fileOptions})
			if d.link != "" {
				target, name, _ := strings.Cut(strings.ReplaceAll(d.link, "%v", f.Version), "::")
				f.Links = append(f.Links, target+"::"+path.Join(path.Dir(p), name))
			}
			break
		}
	}
}

func (f *Files) capMountLists() [][]*specs.Mount {
	var out [][]*specs.Mount
	for _, c := range Extra() {
		out = append(out, f.CapabilityMounts[c])
	}
	return out
}

// fixLibraryPath checks the library a vendor file names. A bare name
// (libGLX_nvidia.so.0, as the driver writes them) is found through the
// linker cache the hook writes, so it must be a library of the driver. An
// absolute path must resolve in the container: when it names one of the
// driver's libraries at another place (a file written for a driver root
// that differs from the container's, such as /run/nvidia/driver/usr/lib/...),
// the hook links that path to where the library is mounted, so the file
// is used as it is, never rewritten.
func (f *Files) fixLibraryPath(lib string, provided map[string]string) error {
	if lib == "" {
		return nil
	}
	at, ok := provided[path.Base(lib)]
	switch {
	case !ok:
		return fmt.Errorf("it names %s, which this driver install does not provide", lib)
	case !path.IsAbs(lib), path.Clean(lib) == at:
		return nil
	}
	f.Links = append(f.Links, at+"::"+path.Clean(lib))
	return nil
}

// checkDataFile reads a host file of the driver within bounds and checks
// that it is what its kind says; it returns the library it names.
func checkDataFile(p string, c check) (string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	file := os.NewFile(uintptr(fd), p)
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(file, maxDataFile+1))
	if err != nil {
		return "", err
	}
	if len(data) > maxDataFile {
		return "", fmt.Errorf("larger than %d KiB", maxDataFile>>10)
	}
	if c == libraryName {
		lib := strings.TrimSpace(string(data))
		if lib == "" || strings.ContainsAny(lib, "\n\x00") {
			return "", errors.New("want one line naming a library")
		}
		return lib, nil
	}
	var doc struct {
		ICD *struct {
			LibraryPath string `json:"library_path"`
		} `json:"ICD"`
		Layer *struct {
			LibraryPath string `json:"library_path"`
		} `json:"layer"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return "", fmt.Errorf("not a JSON object: %w", err)
	}
	switch {
	case c == icdJSON && (doc.ICD == nil || doc.ICD.LibraryPath == ""):
		return "", errors.New(`no "ICD": {"library_path": ...}`)
	case c == icdJSON:
		return doc.ICD.LibraryPath, nil
	case c == layerJSON && (doc.Layer == nil || doc.Layer.LibraryPath == ""):
		return "", errors.New(`no "layer": {"library_path": ...}`)
	case c == layerJSON:
		return doc.Layer.LibraryPath, nil
	}
	return "", nil
}
