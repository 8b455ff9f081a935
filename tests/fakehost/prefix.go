package fakehost

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/inventory"
)

// Prefix is where BuildPrefix installs the driver, and GKEPrefix where
// BuildGKE does.
const (
	Prefix    = "/usr/local/nvidia"
	GKEPrefix = "/home/kubernetes/bin/nvidia"
)

// BuildPrefix fills root with the host a profile describes, its driver
// installed as one prefix on a read-only file system of its own, as on
// the H200 host of docs/hosts.md (a squashfs there, a
// read-only tmpfs here, mounted for the test's length): every file of
// BuildFull, but the libraries in /usr/local/nvidia/lib64 (vdpau's too,
// in lib64/ itself), the programs in bin/ with /usr/bin/nvidia-* shell
// scripts exec'ing them, the GSP firmware in firmware/nvidia/<version>/
// with /sys/module/firmware_class/parameters/path naming firmware/, the
// glvnd and Vulkan JSON files in share/ and in /usr/share, the EGL
// platform and Vulkan layer ones in share/ alone; /etc/ld.so.conf.d lists
// lib64/, and the root's ld.so.cache too. Tests need root.
func BuildPrefix(t testing.TB, root string, p *inventory.Profile) {
	t.Helper()
	if err := BuildFull(root, p); err != nil {
		t.Fatal(err)
	}
	if err := moveDriver(root, Prefix, true); err != nil {
		t.Fatal(err)
	}
	pre := filepath.Join(root, Prefix)
	for _, f := range []struct{ from, to string }{
		{"/lib/firmware/nvidia", "firmware/nvidia"},
		{"/usr/share/egl", "share/egl"},
		{"/usr/share/vulkan/implicit_layer.d", "share/vulkan/implicit_layer.d"},
		{"/usr/share/vulkansc", "share/vulkansc"},
	} {
		if err := move(filepath.Join(root, f.from), filepath.Join(pre, f.to)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"glvnd/egl_vendor.d/10_nvidia.json", "vulkan/icd.d/nvidia_icd.json"} {
		data, err := os.ReadFile(filepath.Join(root, "/usr/share", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFile(filepath.Join(pre, "share", f), string(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for path, content := range map[string]string{
		"/etc/ld.so.conf.d/000_nvidia.conf":          Prefix + "/lib64\n",
		"/sys/module/firmware_class/parameters/path": Prefix + "/firmware\n",
	} {
		if err := writeFile(filepath.Join(root, path), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := ldconfig(root); err != nil {
		t.Fatal(err)
	}
	ownMount(t, pre)
}

// BuildGKE fills root with the host a profile describes, its driver laid
// out as GKE's installer lays it out: every file of BuildFull, but the
// libraries in /home/kubernetes/bin/nvidia/lib64 and the programs in its
// bin/, in no folder /etc/ld.so.conf names, so that the root's
// ld.so.cache lists none of them: only a library search path finds them.
func BuildGKE(root string, p *inventory.Profile) error {
	if err := BuildFull(root, p); err != nil {
		return err
	}
	if err := moveDriver(root, GKEPrefix, false); err != nil {
		return err
	}
	return ldconfig(root)
}

// moveDriver moves BuildFull's libraries (those in LibDir, its vdpau/
// flattened into lib64/ itself, gbm/ kept) to prefix/lib64 and its
// programs to prefix/bin, leaving in /usr/bin, with wrappers, shell
// scripts that exec them there.
func moveDriver(root, prefix string, wrappers bool) error {
	lib, lib64 := filepath.Join(root, LibDir), filepath.Join(root, prefix, "lib64")
	if err := os.MkdirAll(lib64, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(lib)
	if err != nil {
		return err
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case strings.HasPrefix(name, "lib"), name == "gbm":
			if err := move(filepath.Join(lib, name), filepath.Join(lib64, name)); err != nil {
				return err
			}
		case name == "vdpau":
			vdpau, err := os.ReadDir(filepath.Join(lib, name))
			if err != nil {
				return err
			}
			for _, v := range vdpau {
				if err := move(filepath.Join(lib, name, v.Name()), filepath.Join(lib64, v.Name())); err != nil {
					return err
				}
			}
			if err := os.Remove(filepath.Join(lib, name)); err != nil {
				return err
			}
		}
	}
	for _, f := range Driver580 {
		if !f.program {
			continue
		}
		name := filepath.Base(f.path)
		if err := move(filepath.Join(root, f.path), filepath.Join(root, prefix, "bin", name)); err != nil {
			return err
		}
		if wrappers {
			script := fmt.Sprintf("#!/bin/sh\n# the driver's %s lives in its prefix\nexec %s/bin/%s \"$@\"\n", name, prefix, name)
			if err := writeFile(filepath.Join(root, f.path), script, 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// move renames from to to, making to's folder.
func move(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.Rename(from, to)
}

// writeFile writes a file, making its folder.
func writeFile(p, content string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), mode)
}

// ldconfig rebuilds the root's links and ld.so.cache, as the installer's
// own run does.
func ldconfig(root string) error {
	if b, err := exec.Command("ldconfig", "-r", root).CombinedOutput(); err != nil {
		return fmt.Errorf("ldconfig -r %s: %v: %s", root, err, b)
	}
	return nil
}

// ownMount puts dir's content on a tmpfs of its own mounted at dir, read
// only, until the test ends.
func ownMount(t testing.TB, dir string) {
	t.Helper()
	staging := dir + ".staging"
	if err := os.Rename(dir, staging); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=256m"); err != nil {
		t.Fatalf("mount a tmpfs at %s (tests need root): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if b, err := exec.Command("cp", "-a", staging+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s: %v: %s", staging, err, b)
	}
	if err := os.RemoveAll(staging); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
}
