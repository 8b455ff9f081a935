package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

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
	cap   capability.Capability
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
	{cap: capability.Compute, paths: []string{"/etc/OpenCL/vendors/nvidia.icd"}, check: libraryName},
	{cap: capability.Graphics, paths: []string{"/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/etc/glvnd/egl_vendor.d/10_nvidia.json"}, check: icdJSON},
	{cap: capability.Graphics, paths: []string{"/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json", "/etc/egl/egl_external_platform.d/10_nvidia_wayland.json"}, check: icdJSON},
	{cap: capability.Graphics, paths: []string{"/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json", "/etc/egl/egl_external_platform.d/15_nvidia_gbm.json"}, check: icdJSON},
	{cap: capability.Graphics, paths: []string{"/usr/share/egl/egl_external_platform.d/20_nvidia_xcb.json", "/etc/egl/egl_external_platform.d/20_nvidia_xcb.json"}, check: icdJSON},
	{cap: capability.Graphics, paths: []string{"/usr/share/egl/egl_external_platform.d/20_nvidia_xlib.json", "/etc/egl/egl_external_platform.d/20_nvidia_xlib.json"}, check: icdJSON},
	{cap: capability.Graphics, paths: []string{"/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json"}, check: icdJSON},
	{cap: capability.Graphics, paths: []string{"/usr/share/vulkan/implicit_layer.d/nvidia_layers.json", "/etc/vulkan/implicit_layer.d/nvidia_layers.json"}, check: layerJSON},
	{cap: capability.Graphics, paths: []string{"/usr/share/vulkansc/icd.d/nvidia_icd.json", "/etc/vulkansc/icd.d/nvidia_icd.json"}, check: icdJSON},
	{cap: capability.Display, paths: []string{"/usr/share/X11/xorg.conf.d/10-nvidia.conf", "/etc/X11/xorg.conf.d/10-nvidia.conf"}},
	{cap: capability.Display, paths: []string{"/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf", "/etc/X11/xorg.conf.d/nvidia-drm-outputclass.conf"}},
	{cap: capability.Display, paths: []string{"/usr/lib/xorg/modules/drivers/nvidia_drv.so", "/usr/lib64/xorg/modules/drivers/nvidia_drv.so", "/usr/lib/x86_64-linux-gnu/nvidia/xorg/nvidia_drv.so"}},
	{cap: capability.Display, paths: []string{"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.%v", "/usr/lib64/xorg/modules/extensions/libglxserver_nvidia.so.%v", "/usr/lib/x86_64-linux-gnu/nvidia/xorg/libglxserver_nvidia.so.%v"},
		link: "libglxserver_nvidia.so.%v::libglxserver_nvidia.so"},
	{cap: capability.OptiX, paths: []string{"/usr/share/nvidia/nvoptix.bin"}},
	{cap: capability.NGX, paths: []string{"/usr/lib/x86_64-linux-gnu/nvidia/wine/nvngx.dll", "/usr/lib64/nvidia/wine/nvngx.dll"}},
	{cap: capability.NGX, paths: []string{"/usr/lib/x86_64-linux-gnu/nvidia/wine/_nvngx.dll", "/usr/lib64/nvidia/wine/_nvngx.dll"}},
	{cap: capability.SandboxUtils, paths: []string{"/usr/share/nvidia/files.d/sandboxutils-filelist.json"}, check: jsonObject},
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
	prefixes := prefixes(f.LibDirs)
	for _, d := range dataFiles {
		for _, at := range d.places(prefixes) {
			p := strings.ReplaceAll(at.container, "%v", f.Version)
			// Debian's alternatives (Xorg's nvidia_drv.so, through
			// /etc/alternatives, absolute): the file the links lead to
			// under the root, mounted at the usual path.
			hp := follow(r, strings.ReplaceAll(at.host, "%v", f.Version))
			if hp == "" || !isRegular(hp) {
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

// place is where a data file may be under the root, and where a container
// gets it.
type place struct{ host, container string }

// places are where a data file is looked for, in order: its usual paths,
// then the share/ of each driver prefix (/usr/local/nvidia/share/vulkan/...)
// for a file usually in /usr/share, which a container gets there, where
// its loaders look.
func (d dataFile) places(prefixes []string) []place {
	var out []place
	for _, p := range d.paths {
		out = append(out, place{p, p})
	}
	for _, pre := range prefixes {
		for _, p := range d.paths {
			if rest, ok := strings.CutPrefix(p, "/usr/share/"); ok {
				out = append(out, place{path.Join(pre, "share", rest), p})
			}
		}
	}
	return out
}

func (f *Files) capMountLists() [][]*specs.Mount {
	var out [][]*specs.Mount
	for _, c := range capability.Extra() {
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
	data, err := readfile.RegularNoFollow(p, maxDataFile)
	var (
		nr *readfile.NotRegularError
		tl *readfile.TooLargeError
	)
	switch {
	case errors.As(err, &nr):
		return "", errors.New("not a regular file")
	case errors.As(err, &tl):
		return "", fmt.Errorf("larger than %d KiB", maxDataFile>>10)
	case err != nil:
		return "", err
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
