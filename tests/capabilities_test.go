package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// capsProbe prints what a container got of each capability: one line per
// file or link present, the DRM nodes and by-path links, and the driver
// libraries its linker cache lists.
const capsProbe = `lib=/usr/lib/x86_64-linux-gnu; ` +
	`for f in $lib/libcuda.so.1 $lib/libGLX_nvidia.so.0 $lib/libGLX_indirect.so.0 $lib/gbm/nvidia-drm_gbm.so $lib/vdpau/libvdpau_nvidia.so.1 ` +
	`/usr/share/vulkan/icd.d/nvidia_icd.json /usr/share/glvnd/egl_vendor.d/10_nvidia.json /usr/lib/xorg/modules/drivers/nvidia_drv.so ` +
	`/usr/share/nvidia/nvoptix.bin $lib/libnvidia-ngx.so.1 $lib/libnvidia-pkcs11.so.580.65.06 /etc/OpenCL/vendors/nvidia.icd /dev/dri/card* /dev/dri/renderD* /dev/dri/by-path/*; do ` +
	`test -e $f && echo "HAVE $f"; done; ` +
	`/sbin/ldconfig -p | grep -o 'lib[A-Za-z_0-9-]*nvidia[A-Za-z_0-9-]*\.so\.[0-9]* (' | sed 's/ (//' | sort -u | sed 's/^/CACHE /'; ` +
	`grep -o 'EGLVisibleDGPUDevices", 0x[0-9a-f]*' /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf 2>/dev/null | sed 's/^/PROFILE /'; true`

// TestDriverCapabilities runs containers through gpuctk-runtime on a full
// 580 install: NVIDIA_DRIVER_CAPABILITIES picks the capability devices,
// the one hook call makes only the links of what the container got, and
// a GPU's DRM nodes come with the GPU, not with a MIG device. The same
// devices asked for from podman directly give the same files.
func TestDriverCapabilities(t *testing.T) {
	p, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	driverRoot := filepath.Join(t.TempDir(), "driver")
	if err := fakehost.BuildFull(driverRoot, p); err != nil {
		t.Fatal(err)
	}
	h := &runtimeHost{vendor: uniqueVendor(), log: filepath.Join(t.TempDir(), "gpuctk-runtime.log")}
	h.config = writeConfig(t, fmt.Sprintf("[cdi]\nvendor = %q\n\n[runtime]\nlog-file = %q\ncache-dir = %q\n",
		h.vendor, h.log, filepath.Join(t.TempDir(), "cache")))
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--driver-root", driverRoot,
		"--hook-path", bin("gpuctk-hook"), "--output", systemSpecPath(t, h.vendor), "--config", h.config)
	wrapper := h.runtimeWrapper(t)
	lib := "/usr/lib/x86_64-linux-gnu/"
	compute := []string{"HAVE " + lib + "libcuda.so.1", "HAVE /etc/OpenCL/vendors/nvidia.icd", "CACHE libnvidia-ml.so.1"}
	gpu0 := []string{"HAVE /dev/dri/card1", "HAVE /dev/dri/renderD128", "HAVE /dev/dri/by-path/pci-0000:07:00.0-card", "HAVE /dev/dri/by-path/pci-0000:07:00.0-render"}
	graphics := []string{"HAVE " + lib + "libGLX_nvidia.so.0", "HAVE " + lib + "libGLX_indirect.so.0", "HAVE /usr/share/vulkan/icd.d/nvidia_icd.json",
		"HAVE /usr/share/glvnd/egl_vendor.d/10_nvidia.json", "CACHE libGLX_nvidia.so.0", "CACHE libEGL_nvidia.so.0"}
	video := []string{"HAVE " + lib + "vdpau/libvdpau_nvidia.so.1", "CACHE libvdpau_nvidia.so.1"}
	rest := []string{"HAVE /usr/lib/xorg/modules/drivers/nvidia_drv.so", "HAVE /usr/share/nvidia/nvoptix.bin", "HAVE " + lib + "libnvidia-ngx.so.1", "HAVE " + lib + "libnvidia-pkcs11.so.580.65.06"}
	cat := func(lists ...[]string) []string {
		var out []string
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	// With graphics, EGL sees only the container's GPU: GPU 0 (minor 0),
	// or GPU 4 for mig-0.
	profile0, profile4 := []string{`PROFILE EGLVisibleDGPUDevices", 0x1`}, []string{`PROFILE EGLVisibleDGPUDevices", 0x10`}
	everything := cat(compute, gpu0, graphics, video, rest, profile0, profile4)
	for _, tc := range []struct {
		name  string
		flags []string
		want  []string // lines among everything's that must be there; the others must not
	}{
		{"runtime, GPU 0, default capabilities", []string{"--runtime", wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=0"}, cat(compute, gpu0)},
		{"runtime, GPU 0, graphics,video and an unknown name", []string{"--runtime", wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=0", "-e", "NVIDIA_DRIVER_CAPABILITIES=compute,graphics,video,bogus"}, cat(compute, gpu0, graphics, video, profile0)},
		{"runtime, GPU 0, all", []string{"--runtime", wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=0", "-e", "NVIDIA_DRIVER_CAPABILITIES=all"}, cat(compute, gpu0, graphics, video, rest, profile0)},
		{"runtime, MIG device, graphics", []string{"--runtime", wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=mig-0", "-e", "NVIDIA_DRIVER_CAPABILITIES=graphics"}, cat(compute, graphics, profile4)},
		{"podman CDI, GPU 0 and capability-graphics", []string{"--device", h.vendor + "/gpu=0", "--device", h.vendor + "/gpu=capability-graphics"}, cat(compute, gpu0, graphics, profile0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := podman(t, busyboxRoot(t, true), tc.flags, capsProbe)
			if err != nil {
				t.Fatalf("podman: %v\n%s", err, out)
			}
			got := map[string]bool{}
			for _, l := range lines(out) {
				got[l] = true
			}
			want := map[string]bool{}
			for _, l := range tc.want {
				want[l] = true
				if !got[l] {
					t.Errorf("missing %q", l)
				}
			}
			for _, l := range everything {
				if got[l] && !want[l] {
					t.Errorf("unexpected %q", l)
				}
			}
			if t.Failed() {
				t.Logf("inside:\n%s", out)
			}
		})
	}
	log, _ := os.ReadFile(h.log)
	if n := strings.Count(string(log), "bogus"); n != 1 {
		t.Errorf("the unknown capability is in the runtime's log %d times, want once:\n%s", n, log)
	}
}
