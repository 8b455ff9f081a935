package driver

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/specs-go"
)

// Majors of the driver's character devices. 195 is fixed; the UVM and
// capability majors are assigned at load time, so a simulated host names
// them.
const (
	NvidiaMajor   = 195
	ctlMinor      = 255
	modesetMinor  = 254
	standardLib   = "/usr/lib/x86_64-linux-gnu"
	standardBin   = "/usr/bin"
	firmwareDir   = "/lib/firmware/nvidia"
	capsPerGI     = 9   // the GI's access node, then 8 compute instances
	capsPerGPU    = 135 // 15 GPU instances
	firstMIGMinor = 3   // after config (1) and monitor (2)
	drmMajor      = 226
	// firstRenderMinor is the kernel's first render node, renderD128.
	firstRenderMinor = 128
	// standardEGLPlatformVersion stands for the EGL platform libraries'
	// own versions (egl-wayland 1.1.19, egl-gbm 1.1.2 in driver 580).
	standardEGLPlatformVersion = "1.1.0"
)

// Standard returns the files of a standard driver install of the given
// version: libraries in /usr/lib/x86_64-linux-gnu, binaries in /usr/bin,
// device nodes numbered as the driver numbers them with the given dynamic
// majors. It is how a simulated host without a driver root looks.
func Standard(version string, uvmMajor, capsMajor int) *Files {
	f := &Files{Version: version, nodes: standardNodes{uvm: int64(uvmMajor), caps: int64(capsMajor)}}
	for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"} {
		n, _ := f.nodes.node(p)
		f.ControlNodes = append(f.ControlNodes, n)
	}
	for _, l := range libraries {
		if l.lastBranch > 0 && branch(version) > l.lastBranch {
			continue
		}
		suffix := version
		if l.suffix != "" {
			suffix = standardEGLPlatformVersion
		}
		p := path.Join(standardLib, l.dir, l.base+".so."+suffix)
		soname := l.soname
		if soname == "" {
			soname = path.Base(p)
		}
		f.addLibrary(l, p, p, soname)
	}
	f.addGraphicsLinks()
	for _, b := range binaries {
		p := path.Join(standardBin, b)
		f.Mounts = append(f.Mounts, &specs.Mount{HostPath: p, ContainerPath: p, Options: fileOptions})
	}
	for _, fw := range []string{"gsp_ga10x.bin", "gsp_tu10x.bin"} {
		p := path.Join(firmwareDir, version, fw)
		f.Mounts = append(f.Mounts, &specs.Mount{HostPath: p, ContainerPath: p, Options: firmwareOptions})
	}
	f.Mounts = append(f.Mounts, &specs.Mount{HostPath: sockets[0], ContainerPath: sockets[0], Options: socketOptions})
	for _, d := range dataFiles {
		p := strings.ReplaceAll(d.paths[0], "%v", version)
		f.add(d.cap, &specs.Mount{HostPath: p, ContainerPath: p, Options: fileOptions})
		if d.link != "" {
			target, name, _ := strings.Cut(strings.ReplaceAll(d.link, "%v", version), "::")
			f.Links = append(f.Links, target+"::"+path.Join(path.Dir(p), name))
		}
	}
	return f
}

type standardNodes struct{ uvm, caps int64 }

func (s standardNodes) node(p string) (*specs.DeviceNode, error) {
	major, minor := int64(NvidiaMajor), int64(-1)
	var n int64
	switch {
	case p == "/dev/nvidiactl":
		minor = ctlMinor
	case p == "/dev/nvidia-modeset":
		minor = modesetMinor
	case p == "/dev/nvidia-uvm":
		major, minor = s.uvm, 0
	case p == "/dev/nvidia-uvm-tools":
		major, minor = s.uvm, 1
	case scan(p, "/dev/dri/card%d", &n), scan(p, "/dev/dri/renderD%d", &n):
		major, minor = drmMajor, n
	case scan(p, "/dev/nvidia-caps/nvidia-cap%d", &n):
		major, minor = s.caps, n
	case scan(p, "/dev/nvidia%d", &n):
		minor = n
	}
	if minor < 0 {
		return nil, fmt.Errorf("no standard device node %s", p)
	}
	return &specs.DeviceNode{Path: p, Type: "c", Major: major, Minor: minor}, nil
}

// drm numbers a standard host's DRM nodes: card0 is the board's own
// display controller (a BMC's VGA on servers), so GPU minor m has
// card<m+1> and renderD<128+m>.
func (s standardNodes) drm(gpuMinor int, _ string) ([]string, error) {
	return []string{fmt.Sprintf("card%d", gpuMinor+1), fmt.Sprintf("renderD%d", firstRenderMinor+gpuMinor)}, nil
}

func (s standardNodes) capMinor(gpuMinor, gi, ci int) (int, error) {
	return standardCapMinor(gpuMinor, gi, ci), nil
}

// standardCapMinor is the driver's numbering of MIG capability minors, as
// /proc/driver/nvidia-caps/mig-minors lists them: config 1, monitor 2,
// then per GPU 15 GPU instances of 9 minors (the GI, then 8 CIs).
func standardCapMinor(gpuMinor, gi, ci int) int {
	return firstMIGMinor + gpuMinor*capsPerGPU + gi*capsPerGI + ci + 1
}

// branch returns the driver branch of a version, its first number (580
// for 580.65.06); 0 when it has none.
func branch(version string) int {
	major, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}

// scan reports whether s is exactly format filled with one integer.
func scan(s, format string, n *int64) bool {
	var rest string
	k, _ := fmt.Sscanf(s+" $", format+" %s", n, &rest)
	return k == 2 && rest == "$" && fmt.Sprintf(format, *n) == s
}
