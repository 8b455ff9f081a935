package fakehost

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/internal/pcibus"
	"github.com/gpuctk/gpuctk/inventory"
)

// installed is one file of a full driver install, as the 580 driver's
// .run installer and its Debian packages put it. "%v" is the driver version.
type installed struct {
	path string
	// soname makes the file an ELF shared object with that SONAME ("" for
	// data files); "%v" for a library whose SONAME is its file name.
	soname string
	// content is a data file's content; a link's target when link is set.
	content string
	link    bool
	// program makes the file a fake driver program (Program).
	program bool
}

const (
	lib580  = LibDir + "/"
	json580 = `{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "%s"
    }
}
`
)

// Driver580 is every file a 580 driver install puts on a host, the
// kernel modules aside: the libraries of each capability (compute,
// utility, video, graphics with glvnd, EGL platforms and Vulkan, NGX,
// OptiX, pkcs11, sandboxutils, and a few no container needs, such as the
// GTK settings libraries), the vendor JSON files, the Xorg modules and X11
// snippets, the programs, the firmware, and the links the installer makes
// that ldconfig does not (vdpau/, gbm/, .so development links).
var Driver580 = []installed{
	// compute and utility
	{path: lib580 + "libcuda.so.%v", soname: "libcuda.so.1"},
	{path: lib580 + "libcuda.so", content: "libcuda.so.1", link: true},
	{path: lib580 + "libcudadebugger.so.%v", soname: "libcudadebugger.so.1"},
	{path: lib580 + "libnvidia-ml.so.%v", soname: "libnvidia-ml.so.1"},
	{path: lib580 + "libnvidia-ml.so", content: "libnvidia-ml.so.1", link: true},
	{path: lib580 + "libnvidia-ptxjitcompiler.so.%v", soname: "libnvidia-ptxjitcompiler.so.1"},
	{path: lib580 + "libnvidia-nvvm.so.%v", soname: "libnvidia-nvvm.so.4"},
	{path: lib580 + "libnvidia-nvvm70.so.4", soname: "libnvidia-nvvm70.so.4"},
	{path: lib580 + "libnvidia-opencl.so.%v", soname: "libnvidia-opencl.so.1"},
	{path: lib580 + "libnvidia-gpucomp.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-allocator.so.%v", soname: "libnvidia-allocator.so.1"},
	{path: lib580 + "libnvidia-cfg.so.%v", soname: "libnvidia-cfg.so.1"},
	{path: lib580 + "libnvidia-api.so.1", soname: "libnvidia-api.so.1"},
	{path: "/etc/OpenCL/vendors/nvidia.icd", content: "libnvidia-opencl.so.1\n"},
	// video
	{path: lib580 + "libnvcuvid.so.%v", soname: "libnvcuvid.so.1"},
	{path: lib580 + "libnvidia-encode.so.%v", soname: "libnvidia-encode.so.1"},
	{path: lib580 + "libnvidia-opticalflow.so.%v", soname: "libnvidia-opticalflow.so.1"},
	{path: lib580 + "vdpau/libvdpau_nvidia.so.%v", soname: "libvdpau_nvidia.so.1"},
	{path: lib580 + "vdpau/libvdpau_nvidia.so.1", content: "libvdpau_nvidia.so.%v", link: true},
	// graphics: glvnd vendor libraries and their cores
	{path: lib580 + "libGLX_nvidia.so.%v", soname: "libGLX_nvidia.so.0"},
	{path: lib580 + "libEGL_nvidia.so.%v", soname: "libEGL_nvidia.so.0"},
	{path: lib580 + "libGLESv2_nvidia.so.%v", soname: "libGLESv2_nvidia.so.2"},
	{path: lib580 + "libGLESv1_CM_nvidia.so.%v", soname: "libGLESv1_CM_nvidia.so.1"},
	{path: lib580 + "libnvidia-eglcore.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-glcore.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-glsi.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-tls.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-glvkspirv.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-rtcore.so.%v", soname: "%v"},
	{path: lib580 + "libnvoptix.so.%v", soname: "libnvoptix.so.1"},
	{path: lib580 + "libnvidia-fbc.so.%v", soname: "libnvidia-fbc.so.1"},
	{path: lib580 + "libnvidia-vksc-core.so.%v", soname: "libnvidia-vksc-core.so.1"},
	{path: lib580 + "libnvidia-present.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-egl-wayland.so.1.1.19", soname: "libnvidia-egl-wayland.so.1"},
	{path: lib580 + "libnvidia-egl-gbm.so.1.1.2", soname: "libnvidia-egl-gbm.so.1"},
	{path: lib580 + "libnvidia-egl-xcb.so.1.0.1", soname: "libnvidia-egl-xcb.so.1"},
	{path: lib580 + "libnvidia-egl-xlib.so.1.0.1", soname: "libnvidia-egl-xlib.so.1"},
	{path: lib580 + "libGLX_indirect.so.0", content: "libGLX_nvidia.so.0", link: true},
	{path: lib580 + "gbm/nvidia-drm_gbm.so", content: "../libnvidia-allocator.so.1", link: true},
	{path: lib580 + "libnvidia-gtk3.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-wayland-client.so.%v", soname: "%v"},
	{path: "/usr/share/glvnd/egl_vendor.d/10_nvidia.json", content: fmt.Sprintf(json580, "libEGL_nvidia.so.0")},
	{path: "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json", content: fmt.Sprintf(json580, "libnvidia-egl-wayland.so.1")},
	{path: "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json", content: fmt.Sprintf(json580, "libnvidia-egl-gbm.so.1")},
	{path: "/usr/share/egl/egl_external_platform.d/20_nvidia_xcb.json", content: fmt.Sprintf(json580, "libnvidia-egl-xcb.so.1")},
	{path: "/usr/share/egl/egl_external_platform.d/20_nvidia_xlib.json", content: fmt.Sprintf(json580, "libnvidia-egl-xlib.so.1")},
	{path: "/usr/share/vulkan/icd.d/nvidia_icd.json", content: `{
    "file_format_version" : "1.0.1",
    "ICD": {
        "library_path": "libGLX_nvidia.so.0",
        "api_version" : "1.4.312"
    }
}
`},
	{path: "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json", content: `{
    "file_format_version" : "1.0.1",
    "layer": {
        "name": "VK_LAYER_NV_optimus",
        "type": "INSTANCE",
        "library_path": "libGLX_nvidia.so.0",
        "api_version" : "1.4.312",
        "implementation_version" : "1",
        "description" : "NVIDIA Optimus layer",
        "functions": {
            "vkGetInstanceProcAddr": "vk_optimusGetInstanceProcAddr",
            "vkGetDeviceProcAddr": "vk_optimusGetDeviceProcAddr"
        },
        "enable_environment": { "__NV_PRIME_RENDER_OFFLOAD": "1" },
        "disable_environment": { "DISABLE_LAYER_NV_OPTIMUS_1": "" }
    }
}
`},
	{path: "/usr/share/vulkansc/icd.d/nvidia_icd.json", content: fmt.Sprintf(json580, "libnvidia-vksc-core.so.1")},
	// display
	{path: "/usr/lib/xorg/modules/drivers/nvidia_drv.so", soname: "nvidia_drv.so"},
	{path: "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.%v", soname: "%v"},
	{path: "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so", content: "libglxserver_nvidia.so.%v", link: true},
	{path: "/usr/share/X11/xorg.conf.d/10-nvidia.conf", content: "Section \"OutputClass\"\n    Identifier \"nvidia\"\n    MatchDriver \"nvidia-drm\"\n    Driver \"nvidia\"\nEndSection\n"},
	// ngx, optix, pkcs11, sandboxutils
	{path: lib580 + "libnvidia-ngx.so.%v", soname: "libnvidia-ngx.so.1"},
	{path: lib580 + "nvidia/wine/nvngx.dll", content: "MZ nvngx"},
	{path: lib580 + "nvidia/wine/_nvngx.dll", content: "MZ _nvngx"},
	{path: "/usr/share/nvidia/nvoptix.bin", content: "optix data"},
	{path: lib580 + "libnvidia-pkcs11.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-pkcs11-openssl3.so.%v", soname: "%v"},
	{path: lib580 + "libnvidia-sandboxutils.so.%v", soname: "libnvidia-sandboxutils.so.1"},
	{path: "/usr/share/nvidia/files.d/sandboxutils-filelist.json", content: `{"version": "1.0", "files": []}` + "\n"},
	// programs and firmware
	{path: "/usr/bin/nvidia-smi", program: true},
	{path: "/usr/bin/nvidia-debugdump", program: true},
	{path: "/usr/bin/nvidia-persistenced", program: true},
	{path: "/usr/bin/nvidia-cuda-mps-control", program: true},
	{path: "/usr/bin/nvidia-cuda-mps-server", program: true},
	{path: "/usr/bin/nvidia-imex", program: true},
	{path: "/usr/bin/nvidia-imex-ctl", program: true},
	{path: "/usr/bin/nvidia-settings", program: true},
	{path: "/usr/bin/nvidia-xconfig", program: true},
	{path: "/usr/bin/nvidia-bug-report.sh", content: "#!/bin/sh\n"},
	{path: "/lib/firmware/nvidia/%v/gsp_ga10x.bin", content: "firmware"},
	{path: "/lib/firmware/nvidia/%v/gsp_tu10x.bin", content: "firmware"},
}

// DRMCard and DRMRender are the DRM nodes the fake full install gives the
// GPU of minor m: card0 is the board's own display controller.
func DRMCard(m int) string   { return fmt.Sprintf("card%d", m+1) }
func DRMRender(m int) string { return fmt.Sprintf("renderD%d", 128+m) }

// SysfsBusID is a GPU's PCI bus id as /sys names it (0000:07:00.0,
// 10000:01:00.0 for NVML's 00010000:01:00.0); NVML's id when it is none.
func SysfsBusID(nvml string) string {
	if id, ok := pcibus.Sysfs(nvml); ok {
		return id
	}
	return nvml
}

// BuildFull fills root with a full 580 driver install for a profile: what
// Build makes, every file of Driver580, and for each GPU its DRM nodes
// (/dev/dri/cardN and renderDN, major 226, with udev's by-path links) and
// /sys/bus/pci/devices/<bus id>/drm/{cardN,renderDN}.
func BuildFull(root string, p *inventory.Profile) error {
	if err := Build(root, p); err != nil {
		return err
	}
	for _, f := range Driver580 {
		hp := filepath.Join(root, strings.ReplaceAll(f.path, "%v", p.DriverVersion))
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			return err
		}
		os.Remove(hp)
		content := strings.ReplaceAll(f.content, "%v", p.DriverVersion)
		switch {
		case f.link:
			if err := os.Symlink(content, hp); err != nil {
				return err
			}
		case f.program:
			if err := installProgram(filepath.Base(hp), hp); err != nil {
				return err
			}
		case f.soname != "":
			soname := f.soname
			if soname == "%v" {
				soname = filepath.Base(hp)
			}
			if err := installObject(soname, hp); err != nil {
				return err
			}
		default:
			mode := os.FileMode(0o644)
			if strings.HasPrefix(f.path, "/usr/bin/") {
				mode = 0o755 // nvidia-bug-report.sh
			}
			if err := os.WriteFile(hp, []byte(content), mode); err != nil {
				return err
			}
		}
	}
	for _, g := range p.GPUs {
		bus := SysfsBusID(g.PCIBusID)
		for i, name := range []string{DRMCard(g.Minor), DRMRender(g.Minor)} {
			minor := g.Minor + 1
			kind := "card"
			if i == 1 {
				minor, kind = 128+g.Minor, "render"
			}
			if err := os.MkdirAll(filepath.Join(root, "sys/bus/pci/devices", bus, "drm", name), 0o755); err != nil {
				return err
			}
			node := filepath.Join(root, "dev/dri", name)
			if err := os.MkdirAll(filepath.Join(root, "dev/dri/by-path"), 0o755); err != nil {
				return err
			}
			os.Remove(node)
			if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(226, uint32(minor)))); err != nil {
				return fmt.Errorf("mknod %s (tests need root): %w", node, err)
			}
			link := filepath.Join(root, "dev/dri/by-path", "pci-"+bus+"-"+kind)
			os.Remove(link)
			if err := os.Symlink("../"+name, link); err != nil {
				return err
			}
		}
	}
	// The new libraries' SONAME links and the cache, as the installer's
	// own ldconfig run makes them.
	if b, err := exec.Command("ldconfig", "-r", root).CombinedOutput(); err != nil {
		return fmt.Errorf("ldconfig -r %s: %v: %s", root, err, b)
	}
	return nil
}
