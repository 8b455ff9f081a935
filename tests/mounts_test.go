package tests

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// Programs the mount test runs in the container, built with gcc.
const (
	// euid prints its effective uid: a setuid-root copy prints 0 unless
	// the mount is nosuid.
	euidSrc = `#include <stdio.h>
#include <unistd.h>
int main(void) { printf("EUID=%d\n", (int)geteuid()); return 0; }
`
	// uconnect connects to a unix socket and prints what it reads.
	uconnectSrc = `#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
int main(int argc, char **argv) {
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 1; }
	char buf[64]; ssize_t n = read(fd, buf, sizeof buf - 1);
	if (n < 0) { perror("read"); return 1; }
	buf[n] = 0; printf("SOCKET=%s", buf); return 0;
}
`
	// usecuda calls a function of the driver's libcuda.so.1, which the
	// loader maps executable from the library's mount.
	usecudaSrc = `#include <stdio.h>
int gpuctk_fake_symbol(void);
int main(void) { printf("LIBCALL=%d\n", gpuctk_fake_symbol()); return 0; }
`
)

// gccBuild compiles src with args into dir/name.
func gccBuild(t *testing.T, dir, name, src string, args ...string) string {
	t.Helper()
	c := filepath.Join(t.TempDir(), name+".c")
	os.WriteFile(c, []byte(src), 0o644)
	out := filepath.Join(dir, name)
	if b, err := exec.Command("gcc", append([]string{"-o", out, c}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, b)
	}
	return out
}

// TestMountOptions runs a container with a GPU from a fake driver root and
// checks from inside that each kind of mount has the options the spec
// gives it, and that they hold: libraries and programs are read-only but
// executable, a setuid bit on a driver program gives no privilege, the
// firmware cannot be executed, and the persistenced socket, read-only
// too, still accepts connections. The same holds of the driver folder
// (the default: files linked into folder mounts) and of a mount per file.
func TestMountOptions(t *testing.T) {
	fakehost.RequireRoot(t, "podman runs rootful containers")
	driverRoot, _ := fakeDriverRoot(t, "l40s")
	// nvidia-smi: a setuid-root program that prints its effective uid.
	smi := gccBuild(t, filepath.Join(driverRoot, "usr/bin"), "nvidia-smi", euidSrc, "-static")
	if err := os.Chmod(smi, 0o4755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(driverRoot, "run/nvidia-persistenced/socket")
	os.MkdirAll(filepath.Dir(sock), 0o755)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Chmod(sock, 0o666) // persistenced's socket is open to all
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			w := bufio.NewWriter(c)
			w.WriteString("hello\n")
			w.Flush()
			c.Close()
		}
	}()

	cuda, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}

	const lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"
	// The firmware's folder is mounted where the host has it, the rest
	// of the driver folder under /usr/lib/gpuctk and linked.
	const fwDir = "/lib/firmware/nvidia/580.65.06"
	const fw = fwDir + "/gsp_ga10x.bin"
	const sockPath = "/run/nvidia-persistenced/socket"
	for _, tc := range []struct {
		name  string
		flags []string
		// mountOf is the mount point each file is under, and links
		// whether the hook links the files of folder mounts under
		// /usr/lib/gpuctk to their paths.
		mountOf map[string]string
		links   bool
	}{
		// The image has its own /usr/bin/nvidia-smi: the hook mounts the
		// driver's over it, as runc would, and never removes it.
		{"driver folder", nil, map[string]string{lib: "/usr/lib/gpuctk/core", "/usr/bin/nvidia-smi": "/usr/bin/nvidia-smi", fw: fwDir, sockPath: sockPath}, true},
		{"a mount per file", []string{"--driver-folder=false"}, map[string]string{lib: lib, "/usr/bin/nvidia-smi": "/usr/bin/nvidia-smi", fw: fw, sockPath: sockPath}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A glibc image, its own: podman --rootfs keeps what the
			// hook makes. usecuda is linked dynamically, as CUDA
			// programs are.
			rootfs := filepath.Join(t.TempDir(), "rootfs")
			if err := fakehost.Rootfs(rootfs, fakehost.WithGlibc); err != nil {
				t.Fatal(err)
			}
			gccBuild(t, filepath.Join(rootfs, "bin"), "uconnect", uconnectSrc, "-static")
			gccBuild(t, filepath.Join(rootfs, "bin"), "usecuda", usecudaSrc, cuda)
			imageSmi := filepath.Join(rootfs, "usr/bin/nvidia-smi")
			if err := os.MkdirAll(filepath.Dir(imageSmi), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(imageSmi, []byte("#!/bin/sh\necho the image's own\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			vendor := uniqueVendor()
			spec := systemSpecPath(t, vendor)
			run(t, bin("gpuctk"), append([]string{"cdi", "generate", "--simulate", "l40s", "--driver-root", driverRoot,
				"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", writeConfig(t, "")}, tc.flags...)...)
			specData, _ := os.ReadFile(spec)
			if !strings.Contains(string(specData), sockPath) {
				t.Fatalf("the spec does not mount the persistenced socket:\n%s", specData)
			}
			script := `echo x > ` + lib + ` || true; ` +
				`/usr/bin/nvidia-smi; /bin/usecuda; /bin/uconnect ` + sockPath + `; ` +
				fw + ` 2>&1 || true; ` +
				`for f in ` + lib + ` /usr/bin/nvidia-smi ` + fw + `; do echo "LINK $f $(readlink $f)"; done; ` +
				`grep -E ' (/usr/lib/gpuctk/core|` + lib + `|/usr/bin/nvidia-smi|(/usr)?(` + fw + `|` + fwDir + `)|` + sockPath + `) ' /proc/self/mountinfo`
			out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=0", "--user", "1000:1000"}, script)
			if err != nil {
				t.Fatalf("podman: %v\n%s", err, out)
			}
			t.Logf("inside:\n%s", out)
			for _, want := range []string{
				"Read-only file system", // the library cannot be written
				"EUID=1000",             // nosuid: the setuid bit gives nothing
				"LIBCALL=42",            // the library maps executable
				"SOCKET=hello",          // connect(2) works on a read-only socket mount
				"Permission denied",     // the firmware mount is noexec
			} {
				if !strings.Contains(out, want) {
					t.Errorf("inside, no %q", want)
				}
			}
			for _, f := range []string{lib, "/usr/bin/nvidia-smi", fw} {
				want := "LINK " + f + " "
				if tc.links && strings.HasPrefix(tc.mountOf[f], "/usr/lib/gpuctk/") {
					want += tc.mountOf[f] + "/" + filepath.Base(f)
				}
				if !strings.Contains(out, want+"\n") {
					t.Errorf("inside, no %q", want)
				}
			}
			if data, err := os.ReadFile(imageSmi); err != nil || !strings.Contains(string(data), "the image's own") {
				t.Errorf("the image's /usr/bin/nvidia-smi is now %q, %v", data, err)
			}
			if strings.Contains(out, "the image's own") {
				t.Errorf("the image's nvidia-smi ran, not the driver's")
			}
			// Each mount's own options (mountinfo's sixth field).
			for path, want := range map[string][]string{
				lib:                   {"ro", "nosuid", "nodev"},
				"/usr/bin/nvidia-smi": {"ro", "nosuid", "nodev"},
				fw:                    {"ro", "nosuid", "nodev", "noexec"},
				sockPath:              {"ro", "nosuid", "nodev", "noexec"},
			} {
				point := tc.mountOf[path]
				var opts []string
				for _, l := range strings.Split(out, "\n") {
					// /lib is a link to /usr/lib in a merged-/usr image.
					if f := strings.Fields(l); len(f) > 5 && (f[4] == point || f[4] == "/usr"+point) {
						opts = strings.Split(f[5], ",")
					}
				}
				if opts == nil {
					t.Errorf("%s is not mounted (at %s)", path, point)
					continue
				}
				has := map[string]bool{}
				for _, o := range opts {
					has[o] = true
				}
				for _, w := range want {
					if !has[w] {
						t.Errorf("%s is mounted %v, without %s", path, opts, w)
					}
				}
				if path == lib || path == "/usr/bin/nvidia-smi" {
					if has["noexec"] {
						t.Errorf("%s is mounted noexec: it could not be mapped or run", path)
					}
				}
			}
		})
	}
}
