package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
)

// The inside of a container: its nvidia device nodes, whether the driver
// library is mounted, and what the container's own ldconfig -p says.
const inspect = `ls -1 /dev/nvidia* /dev/nvidia-caps/* 2>/dev/null | grep -v :$ | sort; ` +
	`test -f /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06 && echo LIB; ` +
	`l=$(readlink -f /usr/lib/x86_64-linux-gnu/libcuda.so.1); echo SONAME=${l##*/}; ` +
	`/sbin/ldconfig -p | grep -q 'libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1' && echo CACHE; ` +
	`echo VISIBLE=$NVIDIA_VISIBLE_DEVICES; ` +
	`for n in /dev/nvidia[0-9]* /dev/nvidia-caps/*; do test -e $n && stat -c 'NODE %n %F %t:%T' $n; done; true`

func TestPodmanDevices(t *testing.T) {
	driverRoot, p := fakeDriverRoot(t, "dgx-a100")
	vendor := uniqueVendor()
	spec := systemSpecPath(t, vendor)
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--driver-root", driverRoot,
		"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", writeConfig(t, ""))
	rootfs := busyboxRoot(t, true)
	ctl := []string{"/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"}
	// mig-0 is GPU 4's MIG device 0: GI 7, CI 0 -> capability minors
	// 3 + 4*135 + 7*9 = 606 and 607.
	for _, tc := range []struct {
		device string
		nodes  []string
	}{
		{"0", append([]string{"/dev/nvidia0"}, ctl...)},
		{"mig-0", append([]string{"/dev/nvidia-caps/nvidia-cap606", "/dev/nvidia-caps/nvidia-cap607", "/dev/nvidia4"}, ctl...)},
		{"4:0", append([]string{"/dev/nvidia-caps/nvidia-cap606", "/dev/nvidia-caps/nvidia-cap607", "/dev/nvidia4"}, ctl...)},
		{p.GPUs[2].UUID, append([]string{"/dev/nvidia2"}, ctl...)},
		{"all", allNodes(p.GPUs, ctl)},
	} {
		t.Run(tc.device, func(t *testing.T) {
			out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=" + tc.device}, inspect)
			if err != nil {
				t.Fatalf("podman: %v\n%s", err, out)
			}
			checkInside(t, out, tc.nodes)
			if tc.device == "mig-0" {
				// 195 = 0xc3, 511 = 0x1ff, 606 = 0x25e: the numbers the host's nodes carry.
				for _, want := range []string{"NODE /dev/nvidia4 character special file c3:4", "NODE /dev/nvidia-caps/nvidia-cap606 character special file 1ff:25e"} {
					if !strings.Contains(out, want+"\n") {
						t.Errorf("no %q inside", want)
					}
				}
			}
		})
	}

	t.Run("unknown device", func(t *testing.T) {
		out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=9"}, "true")
		if err == nil || !strings.Contains(out, "unresolvable CDI devices "+vendor+"/gpu=9") {
			t.Fatalf("podman with an unknown device: %v\n%s", err, out)
		}
	})
}

func TestPodmanReplicas(t *testing.T) {
	driverRoot, _ := fakeDriverRoot(t, "dgx-a100")
	vendor := uniqueVendor()
	spec := systemSpecPath(t, vendor)
	cfg := writeConfig(t, `
[[sharing]]
devices = ["0", "mig-0"]
strategy = "time-slicing"
replicas = 2
`)
	out := run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--driver-root", driverRoot,
		"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", cfg)
	// By default a replica has its index name only: 2 + 2 replica names,
	// 3 x 2 whole GPU names, 4 x 2 names of GPUs in MIG mode (offered
	// whole too), 15 x 3 MIG device names and "all".
	if want := "8 GPUs, 16 MIG devices, 4 replicas, 64 device names\n"; !strings.HasSuffix(out, want) {
		t.Errorf("generate said %q, want it to end %q", out, want)
	}
	rootfs := busyboxRoot(t, true)
	ctl := []string{"/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidiactl"}
	out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=0::1"}, inspect)
	if err != nil {
		t.Fatalf("podman: %v\n%s", err, out)
	}
	checkInside(t, out, ctl)
	for _, name := range []string{dgxGPU0 + "::1", "4:0::1"} {
		out, err = podman(t, rootfs, []string{"--device", vendor + "/gpu=" + name}, "true")
		if err == nil || !strings.Contains(out, "unresolvable CDI devices "+vendor+"/gpu="+name) {
			t.Errorf("replica name %s, which replica-names leaves out by default: %v\n%s", name, err, out)
		}
	}
	// Two replicas of the same GPU in one container.
	out, err = podman(t, rootfs, []string{"--device", vendor + "/gpu=0::0", "--device", vendor + "/gpu=mig-0::1"}, inspect)
	if err != nil {
		t.Fatalf("podman: %v\n%s", err, out)
	}
	checkInside(t, out, append([]string{"/dev/nvidia-caps/nvidia-cap606", "/dev/nvidia-caps/nvidia-cap607", "/dev/nvidia4"}, ctl...))
	// A shared device is offered only as its replicas.
	out, err = podman(t, rootfs, []string{"--device", vendor + "/gpu=0"}, "true")
	if err == nil || !strings.Contains(out, "unresolvable CDI devices") {
		t.Fatalf("whole shared GPU: %v\n%s", err, out)
	}
}

// checkInside compares a container's inspect output with the nodes it
// should have, and checks the library and linker cache.
func checkInside(t *testing.T, out string, nodes []string) {
	t.Helper()
	t.Logf("inside:\n%s", out)
	sort.Strings(nodes)
	var got []string
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "/dev/") {
			got = append(got, l)
		}
	}
	if strings.Join(got, " ") != strings.Join(nodes, " ") {
		t.Errorf("device nodes:\n got %v\nwant %v", got, nodes)
	}
	for _, want := range []string{"LIB", "SONAME=libcuda.so.580.65.06", "CACHE", "VISIBLE=void"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("inside the container: no %q in\n%s", want, out)
		}
	}
}

// allNodes lists every node of a host's devices plus the control nodes.
func allNodes(gpus []inventory.GPU, ctl []string) []string {
	out := append([]string{}, ctl...)
	for _, g := range gpus {
		out = append(out, fmt.Sprintf("/dev/nvidia%d", g.Minor))
		for _, m := range g.MIG {
			gi := 3 + g.Minor*135 + m.GI*9
			out = append(out, fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", gi), fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", gi+1+m.CI))
		}
	}
	return out
}

// writeConfig writes a gpuctk config file and returns its path.
func writeConfig(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
