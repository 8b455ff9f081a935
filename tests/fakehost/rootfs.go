package fakehost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Rootfs options: what a container root file system holds besides busybox.
const (
	// WithGlibc adds the host's dynamic loader, libc.so.6 and static
	// ldconfig, Debian's ld.so.conf, and an /etc/ld.so.cache written by
	// ldconfig, as a small glibc image has.
	WithGlibc = 1 << iota
	// WithHostLibs also adds every file under the host's LibDir, hard
	// linked (copied across file systems), as a large image has; the cache
	// then lists them all. Nothing writes into those files: a hook replaces
	// files by rename.
	WithHostLibs
)

// rootfsApplets are the busybox commands a test root links to.
var rootfsApplets = []string{"sh", "ls", "cat", "env", "readlink", "grep", "stat", "test", "mount", "sleep", "echo", "true"}

// Rootfs builds a container root file system in dir (created), laid out as
// Debian 12's merged /usr: busybox from the host's busybox-static and its
// applet links, plus what opts add.
func Rootfs(dir string, opts int) error {
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib/x86_64-linux-gnu", "usr/lib64", "etc/ld.so.conf.d", "dev", "proc", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for link, target := range map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			return err
		}
	}
	if err := copyFile("/bin/busybox", filepath.Join(dir, "usr/bin/busybox")); err != nil {
		return fmt.Errorf("%w (install busybox-static)", err)
	}
	for _, a := range rootfsApplets {
		if err := os.Symlink("busybox", filepath.Join(dir, "usr/bin", a)); err != nil {
			return err
		}
	}
	if opts&(WithGlibc|WithHostLibs) == 0 {
		return nil
	}
	lib := filepath.Join(dir, LibDir)
	if opts&WithHostLibs != 0 {
		if err := linkTree(LibDir, lib); err != nil {
			return err
		}
	} else {
		for _, l := range []string{"ld-linux-x86-64.so.2", "libc.so.6"} {
			if err := copyFile(filepath.Join(LibDir, l), filepath.Join(lib, l)); err != nil {
				return err
			}
		}
	}
	if err := os.Symlink("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", filepath.Join(dir, "usr/lib64/ld-linux-x86-64.so.2")); err != nil {
		return err
	}
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		return fmt.Errorf("ldconfig: %w (install libc-bin)", err)
	}
	if err := copyFile(ldconfig, filepath.Join(dir, "usr/sbin/ldconfig")); err != nil {
		return err
	}
	files := map[string]string{
		"etc/ld.so.conf":                         "include /etc/ld.so.conf.d/*.conf\n",
		"etc/ld.so.conf.d/libc.conf":             "/usr/local/lib\n",
		"etc/ld.so.conf.d/x86_64-linux-gnu.conf": "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if out, err := exec.Command(ldconfig, "-r", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("ldconfig -r %s: %v: %s", dir, err, out)
	}
	return nil
}

// copyFile copies src (following links) to dst, keeping its mode.
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, st.Mode().Perm())
}

// linkTree recreates src under dst: folders made, symbolic links copied as
// links, files hard linked or copied.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			if err := os.Link(p, to); err == nil || !errors.Is(err, unix.EXDEV) {
				return err
			}
			return copyFile(p, to)
		}
		return nil // sockets, pipes: not in a library folder
	})
}
