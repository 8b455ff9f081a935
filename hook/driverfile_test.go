package hook

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// folderBundle makes a bundle whose root has the driver folder mounted at
// /usr/lib/gpuctk/core and firmware, as runc leaves it for the hook:
// libcuda, a program and a firmware file.
func folderBundle(t *testing.T) (string, string) {
	t.Helper()
	b, root := bundle(t)
	core, fw := filepath.Join(root, "usr/lib/gpuctk/core"), filepath.Join(root, "usr/lib/gpuctk/firmware")
	for _, d := range []string{core, fw} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(filepath.Join(root, libDir, "libcuda.so.580.65.06"), filepath.Join(core, "libcuda.so.580.65.06")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(core, "nvidia-smi"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(fw, "gsp.bin"), []byte("fw"), 0o644)
	return b, root
}

var driverFileArgs = []string{"setup",
	"--driver-file", "/usr/lib/gpuctk/core/libcuda.so.580.65.06::" + libDir + "/libcuda.so.580.65.06",
	"--driver-file", "/usr/lib/gpuctk/core/nvidia-smi::/usr/bin/nvidia-smi",
	"--driver-file", "/usr/lib/gpuctk/firmware/gsp.bin::/lib/firmware/nvidia/580.65.06/gsp.bin",
	"--driver-file", "/usr/lib/gpuctk/graphics/libGLX_nvidia.so.580.65.06::" + libDir + "/libGLX_nvidia.so.580.65.06",
	"--link", "libcuda.so.580.65.06::" + libDir + "/libcuda.so.1",
	"--link", "libGLX_nvidia.so.580.65.06::" + libDir + "/libGLX_nvidia.so.0",
	"--library", libDir + "/libcuda.so.1",
	"--library", libDir + "/libGLX_nvidia.so.0",
	"--folder", libDir}

func TestSetupDriverFiles(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name   string
		osRoot bool
		plant  func(t *testing.T, root string)
		// fails is what the one line of error says; "" for success.
		fails string
		// kept is an image file left as it is, with a warning.
		kept string
		// untouched is an image file left as it is, without a word.
		untouched string
	}{
		{name: "files linked"},
		{name: "files linked, without openat2", osRoot: true},
		// The image's link is replaced; its own file is never removed:
		// outside a container's mount namespace (here) it is left, with
		// a warning (in one, the driver's is mounted over it: see
		// tests/mounts_test.go).
		{name: "image's own link replaced, its file kept", plant: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
			os.WriteFile(filepath.Join(root, "usr/bin/nvidia-smi"), []byte("image's"), 0o755)
			os.Symlink("/nowhere", filepath.Join(root, libDir, "libcuda.so.580.65.06"))
		}, kept: "/usr/bin/nvidia-smi"},
		// A capability the container was not given gets none of its
		// links, even to a file of the same name the image has, and
		// nothing of it is looked up in the root.
		{name: "image's own copy of a file of a capability not given", plant: func(t *testing.T, root string) {
			os.WriteFile(filepath.Join(root, libDir, "libGLX_nvidia.so.580.65.06"), []byte("image's"), 0o755)
		}, untouched: libDir + "/libGLX_nvidia.so.580.65.06"},
		{name: "image has a folder there", plant: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "usr/bin/nvidia-smi"), 0o755)
		}, fails: "driver file /usr/bin/nvidia-smi: the image has a folder there"},
		// usr-merged images: /lib is a link to usr/lib, and the firmware
		// folders are made there.
		{name: "firmware folders made through the image's /lib link", plant: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755)
			os.RemoveAll(filepath.Join(root, "lib"))
			os.Symlink("usr/lib", filepath.Join(root, "lib"))
		}},
		{name: "firmware folders made through the image's /lib link, without openat2", osRoot: true, plant: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755)
			os.RemoveAll(filepath.Join(root, "lib"))
			os.Symlink("usr/lib", filepath.Join(root, "lib"))
		}},
		{name: "a file where a folder goes", plant: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "lib"), 0o755)
			os.WriteFile(filepath.Join(root, "lib/firmware"), []byte("image's"), 0o644)
		}, fails: "not a directory"},
		{name: "a file where a folder goes, without openat2", osRoot: true, plant: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "lib"), 0o755)
			os.WriteFile(filepath.Join(root, "lib/firmware"), []byte("image's"), 0o644)
		}, fails: "not a directory"},
		{name: "a dangling link where a folder goes", plant: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "lib"), 0o755)
			os.Symlink("nowhere", filepath.Join(root, "lib/firmware"))
		}, fails: "lib/firmware"},
		{name: "a dangling link where a folder goes, without openat2", osRoot: true, plant: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "lib"), 0o755)
			os.Symlink("nowhere", filepath.Join(root, "lib/firmware"))
		}, fails: "lib/firmware"},
		{name: "program folder links out of the root", plant: func(t *testing.T, root string) {
			os.Symlink(outside, filepath.Join(root, "usr/bin"))
		}, fails: "escapes"},
		{name: "mount folder links out of the root", plant: func(t *testing.T, root string) {
			os.Symlink(outside, filepath.Join(root, "usr/lib/gpuctk/graphics"))
		}, fails: "escapes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := folderBundle(t)
			if tc.plant != nil {
				tc.plant(t, root)
			}
			code, stderr := runHookWith(t, tc.osRoot, b, driverFileArgs...)
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("files appeared outside the root: %v", entries)
			}
			if tc.fails != "" {
				if code == 0 || !strings.Contains(stderr, tc.fails) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
					t.Fatalf("exit %d, stderr %q; want one line saying %q", code, stderr, tc.fails)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if tc.kept != "" {
				data, err := os.ReadFile(filepath.Join(root, tc.kept))
				if string(data) != "image's" || err != nil {
					t.Errorf("the image's %s is now %q, %v", tc.kept, data, err)
				}
				if want := "gpuctk-hook: warning: " + tc.kept + " is the image's own file: left as it is (not in the container's mount namespace: no mount over it)\n"; stderr != want {
					t.Errorf("stderr %q, want %q", stderr, want)
				}
			}
			if tc.untouched != "" {
				data, err := os.ReadFile(filepath.Join(root, tc.untouched))
				if string(data) != "image's" || err != nil || stderr != "" {
					t.Errorf("the image's %s is now %q, %v; stderr %q", tc.untouched, data, err, stderr)
				}
			}
			// Each file of the mounted folder is at its usual path, the
			// image's own replaced; the graphics folder is not mounted,
			// so its file and the link to it are not made.
			for link, want := range map[string]string{
				libDir + "/libcuda.so.580.65.06":         "/usr/lib/gpuctk/core/libcuda.so.580.65.06",
				"/usr/bin/nvidia-smi":                    "/usr/lib/gpuctk/core/nvidia-smi",
				"/lib/firmware/nvidia/580.65.06/gsp.bin": "/usr/lib/gpuctk/firmware/gsp.bin",
				libDir + "/libcuda.so.1":                 "/usr/lib/gpuctk/core/libcuda.so.580.65.06",
				libDir + "/libGLX_nvidia.so.580.65.06":   "",
				libDir + "/libGLX_nvidia.so.0":           "",
			} {
				if link == tc.kept || link == tc.untouched {
					continue
				}
				got, err := os.Readlink(filepath.Join(root, link))
				if want == "" {
					if !os.IsNotExist(err) {
						t.Errorf("%s -> %q, %v; want no link", link, got, err)
					}
					continue
				}
				if err != nil || got != want {
					t.Errorf("%s -> %q, %v; want %q", link, got, err, want)
				}
			}
			// The SONAME link is another name of the library's link, not
			// an inode of its own.
			sameFile(t, root, libDir+"/libcuda.so.1", libDir+"/libcuda.so.580.65.06")
			// The cache names libcuda through the link, and the loader
			// finds it in the root.
			out, err := exec.Command(DefaultLdconfig, "-p", "-C", filepath.Join(root, "etc/ld.so.cache")).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") || strings.Contains(string(out), "libGLX") {
				t.Fatalf("ldconfig -p: %v\n%s", err, out)
			}
			// A restarted container: the same links, no error.
			if code, stderr := runHookWith(t, tc.osRoot, b, driverFileArgs...); code != 0 {
				t.Fatalf("second run: exit %d: %s", code, stderr)
			}
			sameFile(t, root, libDir+"/libcuda.so.1", libDir+"/libcuda.so.580.65.06")
		})
	}
}

// sameFile fails the test unless a and b, paths in root, are names of the
// same file (a hard link), not followed if links.
func sameFile(t *testing.T, root, a, b string) {
	t.Helper()
	fa, err := os.Lstat(filepath.Join(root, a))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Lstat(filepath.Join(root, b))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fa, fb) {
		t.Errorf("%s and %s are different files; want two names of one", a, b)
	}
}

func TestSetupDriverFileArgs(t *testing.T) {
	for _, arg := range []string{"relative::/usr/bin/x", "/usr/lib/gpuctk/core/x::usr/bin/x", "/usr/lib/gpuctk/core/x", "/::/usr/bin/x", "/x::/usr/bin/x", "/usr/lib/gpuctk/core/x::/"} {
		b, _ := folderBundle(t)
		code, stderr := runHook(t, b, "setup", "--driver-file", arg)
		if code == 0 || !strings.Contains(stderr, "want /FOLDER/NAME::/PATH") {
			t.Errorf("--driver-file %q: exit %d, %q", arg, code, stderr)
		}
	}
}

// TestSetupHardLinks: a SONAME link to a link the hook made is a second
// name of it, whatever the image has at that name, except its own file.
func TestSetupHardLinks(t *testing.T) {
	soname := libDir + "/libcuda.so.1"
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, root string)
		// want is what the SONAME link is: "hard" a second name of the
		// library's link, else the target of a link of its own, or the
		// content of the image's file.
		want, warning string
	}{
		{name: "new", want: "hard"},
		{name: "the image's link elsewhere, replaced", plant: func(t *testing.T, root string) {
			os.Symlink("/nowhere", filepath.Join(root, soname))
		}, want: "hard"},
		{name: "an older hook's link of its own, kept", plant: func(t *testing.T, root string) {
			os.Symlink("libcuda.so.580.65.06", filepath.Join(root, soname))
		}, want: "libcuda.so.580.65.06"},
		{name: "the image's own file, left", plant: func(t *testing.T, root string) {
			os.WriteFile(filepath.Join(root, soname), []byte("image's"), 0o755)
		}, want: "image's", warning: "gpuctk-hook: warning: " + soname + " exists in the image and is not a link; left as it is\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := folderBundle(t)
			if tc.plant != nil {
				tc.plant(t, root)
			}
			// Without --folder: a root with no cache gets one of the
			// driver's libraries, and no ldconfig, whose own links
			// would hide what the hook did.
			args := slices.DeleteFunc(slices.Clone(driverFileArgs), func(a string) bool { return a == "--folder" || a == libDir })
			code, stderr := runHook(t, b, args...)
			if code != 0 || stderr != tc.warning {
				t.Fatalf("exit %d, stderr %q; want 0, %q", code, stderr, tc.warning)
			}
			p := filepath.Join(root, soname)
			switch got, err := os.Readlink(p); {
			case tc.want == "hard":
				sameFile(t, root, soname, libDir+"/libcuda.so.580.65.06")
			case err == nil:
				if got != tc.want {
					t.Errorf("%s -> %q; want %q", soname, got, tc.want)
				}
			default:
				if data, _ := os.ReadFile(p); string(data) != tc.want {
					t.Errorf("%s holds %q; want %q", soname, data, tc.want)
				}
			}
		})
	}
}

// TestSetupLdconfigLeavesImageFile: the ldconfig the hook runs when the
// image has no cache leaves the image's own file at a library's SONAME,
// as the hook does, whoever runs the hook: root, or a user whose ldconfig
// chroots in a user namespace of its own.
func TestSetupLdconfigLeavesImageFile(t *testing.T) {
	b, root := folderBundle(t)
	soname := filepath.Join(root, libDir, "libcuda.so.1")
	if err := os.WriteFile(soname, []byte("image's"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, stderr := runHook(t, b, driverFileArgs...)
	want := "gpuctk-hook: warning: " + libDir + "/libcuda.so.1 exists in the image and is not a link; left as it is\n"
	if code != 0 || stderr != want {
		t.Fatalf("exit %d, stderr %q; want 0, %q", code, stderr, want)
	}
	if data, err := os.ReadFile(soname); err != nil || string(data) != "image's" {
		t.Errorf("%s holds %q (%v); want the image's file left", libDir+"/libcuda.so.1", data, err)
	}
	// ldconfig ran: its cache names the library at its SONAME.
	if out := ldconfigP(t, root); !strings.Contains(out, "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") {
		t.Errorf("ldconfig -p of the cache:\n%s", out)
	}
}

// TestSetupLdconfigNoChroot: a hook that may neither chroot nor make a
// user namespace fails in one line rather than run ldconfig -r unchrooted
// (which takes some paths as the host's and replaces the image's file at
// a SONAME), and leaves the image's file.
func TestSetupLdconfigNoChroot(t *testing.T) {
	for _, p := range []string{"unshare", "setpriv"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s (util-linux) is needed: %v", p, err)
		}
	}
	bin := hookBin(t)
	b, root := folderBundle(t)
	soname := filepath.Join(root, libDir, "libcuda.so.1")
	if err := os.WriteFile(soname, []byte("image's"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Root of a user namespace of its own in which no further one may
	// be made, without CAP_SYS_ADMIN (a mount namespace) and
	// CAP_SYS_CHROOT.
	script := `echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --bounding-set=-sys_admin,-sys_chroot -- "$@"`
	cmd := exec.Command("unshare", append([]string{"--user", "--map-root-user", "sh", "-c", script, "sh", bin}, driverFileArgs...)...)
	cmd.Stdin = strings.NewReader(`{"bundle":"` + b + `"}`)
	out, err := cmd.CombinedOutput()
	if os.Geteuid() != 0 && strings.Contains(string(out), "unshare failed") {
		t.Skipf("no user namespaces for this user: %s", out)
	}
	msg := strings.TrimSpace(string(out))
	lines := strings.Split(msg, "\n")
	want := "needs to chroot into the container root, and the hook may neither (no CAP_SYS_CHROOT) nor make a user namespace"
	if err == nil || !strings.Contains(lines[len(lines)-1], want) {
		t.Fatalf("exit %v, output %q; want a failure saying %q", err, msg, want)
	}
	if data, err := os.ReadFile(soname); err != nil || string(data) != "image's" {
		t.Errorf("%s holds %q (%v); want the image's file left", libDir+"/libcuda.so.1", data, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/ld.so.cache")); err == nil {
		t.Errorf("a cache was written")
	}
}
