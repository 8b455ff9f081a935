package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// driverFSProfile is the host of the driverfs rows: one GPU, a whole one.
const driverFSProfile = "l40s"

// driverFS times a container's start (runc create of GPU 0 through
// gpuctk-runtime) with a full 580 driver installed two ways, in one run:
// as distributions install it, on the file system of the driver folder
// (hard links), and in a prefix on a read-only file system of its own
// (/usr/local/nvidia on a tmpfs remounted read-only, as a squashfs), where
// the driver folder cannot be made and the prefix is mounted whole.
func (b *bench) driverFS() error {
	profile, err := inventory.LoadProfile(driverFSProfile)
	if err != nil {
		return err
	}
	same := filepath.Join(b.work, "driverfs-same")
	own := filepath.Join(b.work, "driverfs-own")
	for _, root := range []string{same, own} {
		if err := fakehost.BuildFull(root, profile); err != nil {
			return fmt.Errorf("fake driver root: %w", err)
		}
		// As on the GPU host of docs/hosts.md, no OpenCL
		// vendor file in /etc: the common edits' files are all the
		// prefix's there.
		if err := os.Remove(filepath.Join(root, "etc/OpenCL/vendors/nvidia.icd")); err != nil {
			return err
		}
	}
	prefix := filepath.Join(own, "usr/local/nvidia")
	unmount, err := toPrefix(own, prefix)
	if unmount != nil {
		defer unmount()
	}
	if err != nil {
		return err
	}
	shm, err := os.MkdirTemp("/dev/shm", "gpuctk-bench-")
	if err != nil {
		return err
	}
	if !b.o.keep {
		defer os.RemoveAll(shm)
	}
	vendor := fmt.Sprintf("gpuctk-bench-%d.example.com", os.Getpid())
	var jobs []job
	var mounts []int
	// The third: the driver on its own file system, a mount per file,
	// as before the prefix could be mounted whole.
	for i, root := range []string{same, own, own} {
		name := filepath.Base(root)
		var flags []string
		if i == 2 {
			name, flags = name+"-files", []string{"--driver-folder=false"}
		}
		specDir := filepath.Join(b.work, "cdi-"+name)
		if err := os.MkdirAll(specDir, 0o755); err != nil {
			return err
		}
		out := filepath.Join(specDir, "gpuctk.yaml")
		// The store of copies, should one be made, is the run's own.
		config := writeFile(b.work, name+".toml", fmt.Sprintf("[cdi]\ndriver-store = %q\n", filepath.Join(b.work, "store-"+name)))
		if msg, err := exec.Command(b.bin("gpuctk"), append([]string{"cdi", "generate", "--simulate", driverFSProfile, "--driver-root", root,
			"--vendor", vendor, "--hook-path", b.bin("gpuctk-hook"), "--config", config, "--output", out}, flags...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("gpuctk cdi generate: %v: %s", err, msg)
		} else if strings.Contains(string(msg), "one by one") {
			return fmt.Errorf("gpuctk cdi generate, driver under %s: %s", root, msg)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		spec, err := cdiapi.ParseSpec(data)
		if err != nil {
			return fmt.Errorf("the generated spec %s: %w", out, err)
		}
		call, err := specHook(spec)
		if err != nil {
			return err
		}
		mounts = append(mounts, len(spec.ContainerEdits.Mounts))
		croot, err := newHookRoot(shm, "root-"+name, fakehost.WithGlibc, call)
		if err != nil {
			return err
		}
		rb, err := newRuntimeBundle(shm, "bundle-"+name, b.bin("gpuctk-runtime"), specDir, vendor, "0", shm, croot)
		if err != nil {
			return err
		}
		all, err := rb.jobs(b.bin("gpuctk-runtime"))
		if err != nil {
			return err
		}
		if len(jobs) == 0 {
			jobs = append(jobs, all[0]) // runc, no device
		}
		jobs = append(jobs, all[2]) // gpuctk-runtime, cache warm
	}
	b.step("timing: container start, driver on the driver folder's file system (%d mounts), on its own read-only one (%d), and so with a mount per file (%d)", mounts[0], mounts[1], mounts[2])
	s, err := interleave(runtimeRuns(b.o), b.o.warm, jobs...)
	if err != nil {
		return err
	}
	label := fmt.Sprintf("Container start over plain runc (runc create of GPU 0 through gpuctk-runtime, a full 580 driver), the driver folder on the driver's file system: hard links, %d mounts", mounts[0])
	b.r.timed(label, "runc create, no device", s[0], s[1], 0)
	b.r.timed(fmt.Sprintf("Container start, the same with the driver on its own read-only file system (/usr/local/nvidia, a tmpfs remounted read-only): the prefix mounted whole, %d mounts", mounts[1]),
		"runc create, no device", s[0], s[2], 0)
	b.r.timed("Container start, the driver on its own read-only file system, over the same on the driver folder's", "the same-file-system start, same round", s[1], s[2], 2*time.Millisecond)
	b.r.timed(fmt.Sprintf("Container start, the driver on its own read-only file system with [cdi] driver-folder = false (a mount per file, %d mounts), for comparison", mounts[2]),
		"runc create, no device", s[0], s[3], 0)
	return nil
}

// toPrefix moves the driver's libraries and programs of a fake root into
// prefix's lib64/ and bin/, on a tmpfs of its own remounted read-only,
// which the root's linker cache then lists; it returns what unmounts it.
func toPrefix(root, prefix string) (func(), error) {
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return nil, err
	}
	if err := unix.Mount("tmpfs", prefix, "tmpfs", 0, "size=256m,mode=0755"); err != nil {
		return nil, fmt.Errorf("tmpfs at %s: %w", prefix, err)
	}
	unmount := func() { unix.Unmount(prefix, unix.MNT_DETACH) }
	// The fake root's library folder and programs are all the driver's.
	move := func(from, to string, keep func(string) bool) error {
		if err := os.MkdirAll(to, 0o755); err != nil {
			return err
		}
		entries, err := os.ReadDir(from)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !keep(e.Name()) {
				continue
			}
			if out, err := exec.Command("cp", "-a", filepath.Join(from, e.Name()), to).CombinedOutput(); err != nil {
				return fmt.Errorf("cp %s: %v: %s", e.Name(), err, out)
			}
			if err := os.RemoveAll(filepath.Join(from, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	if err := move(filepath.Join(root, fakehost.LibDir), filepath.Join(prefix, "lib64"), func(string) bool { return true }); err != nil {
		return unmount, err
	}
	if err := move(filepath.Join(root, "usr/bin"), filepath.Join(prefix, "bin"), func(n string) bool { return strings.HasPrefix(n, "nvidia-") }); err != nil {
		return unmount, err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf.d/x86_64-linux-gnu.conf"), []byte("/usr/local/nvidia/lib64\n"), 0o644); err != nil {
		return unmount, err
	}
	if out, err := exec.Command("ldconfig", "-r", root).CombinedOutput(); err != nil {
		return unmount, fmt.Errorf("ldconfig -r %s: %v: %s", root, err, out)
	}
	if err := unix.Mount("", prefix, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return unmount, err
	}
	return unmount, nil
}
