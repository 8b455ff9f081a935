package hook

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// snapshot lists every file under dir with its content, to prove nothing
// outside a container root changed.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		b.WriteString(p + " " + info.Mode().String())
		if info.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.Write(data)
		}
		if info.Mode()&os.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			b.WriteString(" -> " + l)
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// TestSetupHostileLayouts plants links in the image that point outside the
// root, or at /proc/self/root, on every path the hook touches, with and
// without an image cache (merge path and ldconfig path). Each time the
// host folder is unchanged and the hook either works or fails in one line.
func TestSetupHostileLayouts(t *testing.T) {
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, "etc/ld.so.conf.d"), 0o755)
	os.WriteFile(filepath.Join(outside, "etc/ld.so.cache"), []byte("host cache"), 0o644)
	os.MkdirAll(filepath.Join(outside, "lib"), 0o755)
	before := snapshot(t, outside)
	plants := map[string]func(root string){
		"/etc to outside": func(r string) {
			os.RemoveAll(filepath.Join(r, "etc"))
			os.Symlink(filepath.Join(outside, "etc"), filepath.Join(r, "etc"))
		},
		"/etc to /proc/self/root/...": func(r string) {
			os.RemoveAll(filepath.Join(r, "etc"))
			os.Symlink("/proc/self/root"+outside+"/etc", filepath.Join(r, "etc"))
		},
		"/etc relative escape": func(r string) {
			os.RemoveAll(filepath.Join(r, "etc"))
			os.Symlink("../../../../../../../../"+outside+"/etc", filepath.Join(r, "etc"))
		},
		"ld.so.cache to outside": func(r string) {
			os.Remove(filepath.Join(r, "etc/ld.so.cache"))
			os.Symlink(filepath.Join(outside, "etc/ld.so.cache"), filepath.Join(r, "etc/ld.so.cache"))
		},
		"ld.so.conf.d to outside": func(r string) {
			os.Symlink(filepath.Join(outside, "etc/ld.so.conf.d"), filepath.Join(r, "etc/ld.so.conf.d"))
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("include /etc/ld.so.conf.d/*.conf\n"), 0o644)
		},
		"lib folder to outside": func(r string) {
			os.RemoveAll(filepath.Join(r, libDir))
			os.Symlink(filepath.Join(outside, "lib"), filepath.Join(r, libDir))
		},
		"lib folder's parent to outside": func(r string) {
			os.RemoveAll(filepath.Join(r, "usr/lib"))
			os.Symlink(outside, filepath.Join(r, "usr/lib"))
		},
		"SONAME link to outside": func(r string) {
			os.Symlink(filepath.Join(outside, "lib/libcuda.so.1"), filepath.Join(r, libDir, "libcuda.so.1"))
		},
		"SONAME link to /proc/self/root": func(r string) {
			os.Symlink("/proc/self/root"+outside+"/lib/x", filepath.Join(r, libDir, "libcuda.so.1"))
		},
	}
	for name, plant := range plants {
		for _, tc := range []struct {
			withCache, osRoot bool
		}{{false, false}, {true, false}, {false, true}, {true, true}} {
			t.Run(name+map[bool]string{false: "/no cache", true: "/image cache"}[tc.withCache]+map[bool]string{false: "", true: "/os.Root"}[tc.osRoot], func(t *testing.T) {
				b, root := bundle(t)
				if tc.withCache {
					imageCache(t, root)
				}
				plant(root)
				args := append(append([]string{}, setupArgs...), "--library", libDir+"/libcuda.so.1")
				code, stderr := runHookWith(t, tc.osRoot, b, args...)
				if code != 0 && strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
					t.Errorf("failure is more than one line: %q", stderr)
				}
				if after := snapshot(t, outside); after != before {
					t.Fatalf("the host folder changed (hook exit %d, %q):\n%s", code, stderr, after)
				}
			})
		}
	}
}

// TestSetupLdconfigProcEscape: when the runtime runs createContainer
// hooks, the container's procfs is mounted in the root and its processes
// (runc init, the hook) have the host's root, so /proc/PID/root there is a
// magic link out of the root, which ldconfig, chrooted into it, would
// follow. The image plants paths through one (here the test's own pid,
// under the root's /proc or under a host /proc mounted as a volume) where
// ldconfig writes: its aux cache folder, a folder ld.so.conf names, a
// hwcap subfolder of a library folder. Nothing outside the root changes,
// and the cache is still rebuilt with the driver's library.
func TestSetupLdconfigProcEscape(t *testing.T) {
	fakehost.RequireRoot(t, "a procfs mounted in the container root, and the hook's chroot'ed ldconfig")
	obj, err := fakehost.SharedObject("libhost.so.7")
	if err != nil {
		t.Fatal(err)
	}
	lib, _ := os.ReadFile(obj)
	for _, tc := range []struct {
		name   string
		procAt string // where a procfs is mounted in the root
		plant  func(root, host string)
	}{
		{"aux cache folder", "proc", func(r, host string) {
			os.MkdirAll(filepath.Join(r, "var/cache"), 0o755)
			os.Symlink(host, filepath.Join(r, "var/cache/ldconfig"))
		}},
		{"ld.so.conf folder", "proc", func(r, host string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte(host+"\n"), 0o644)
		}},
		{"hwcap subfolder", "proc", func(r, host string) {
			os.Symlink(host, filepath.Join(r, libDir, "tls"))
		}},
		{"aux cache folder, the host's /proc as a volume", "host/proc", func(r, host string) {
			os.MkdirAll(filepath.Join(r, "var/cache"), 0o755)
			os.Symlink(host, filepath.Join(r, "var/cache/ldconfig"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outside := t.TempDir()
			os.WriteFile(filepath.Join(outside, "libhost.so.7.1"), lib, 0o755)
			before := snapshot(t, outside)
			b, root := bundle(t)
			os.MkdirAll(filepath.Join(root, "etc"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("/usr/local/lib\n"), 0o644)
			proc := filepath.Join(root, tc.procAt)
			os.MkdirAll(proc, 0o555)
			if err := unix.Mount("proc", proc, "proc", 0, ""); err != nil {
				t.Fatalf("mount a procfs: %v", err)
			}
			t.Cleanup(func() { unix.Unmount(proc, unix.MNT_DETACH) })
			tc.plant(root, fmt.Sprintf("/%s/%d/root%s", tc.procAt, os.Getpid(), outside))
			if code, stderr := runHook(t, b, setupArgs...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if after := snapshot(t, outside); after != before {
				t.Fatalf("the host folder changed:\n%s", after)
			}
			if out := ldconfigP(t, root); !strings.Contains(out, "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") {
				t.Errorf("the cache lacks the driver:\n%s", out)
			}
		})
	}
}

// TestSetupRace flips the library folder and /etc between real folders
// and links to the host while the hook runs, many times: no write may
// ever land outside the root.
func TestSetupRace(t *testing.T) {
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, "lib"), 0o755)
	os.MkdirAll(filepath.Join(outside, "etc"), 0o755)
	os.WriteFile(filepath.Join(outside, "etc/ld.so.cache"), []byte("host cache"), 0o644)
	before := snapshot(t, outside)
	b, root := bundle(t)
	imageCache(t, root)
	args := append(append([]string{}, setupArgs...), "--library", libDir+"/libcuda.so.1", "--ldconfig", "/nonexistent/ldconfig")
	var stop atomic.Bool
	var wg sync.WaitGroup
	flip := func(real, link string) {
		defer wg.Done()
		hold := real + ".real"
		for !stop.Load() {
			// Swap the real folder for a link to the host, then back,
			// leaving it real most of the time so some runs complete.
			if os.Rename(real, hold) == nil {
				os.Symlink(link, real)
				runtime.Gosched()
				os.Remove(real)
				os.Rename(hold, real)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wg.Add(2)
	go flip(filepath.Join(root, libDir), filepath.Join(outside, "lib"))
	go flip(filepath.Join(root, "etc"), filepath.Join(outside, "etc"))
	ok, failed := 0, 0
	for i := 0; i < 300; i++ {
		code, stderr := runHook(t, b, args...)
		if code == 0 {
			ok++
			continue
		}
		failed++
		if failed <= 3 {
			t.Logf("failure: %s", strings.TrimSpace(stderr))
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("failure is more than one line: %q", stderr)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d runs did their work, %d failed cleanly", ok, failed)
	if ok == 0 {
		t.Error("no run did its work: the race test tested nothing but failures")
	}
	if after := snapshot(t, outside); after != before {
		t.Fatalf("the host folder changed:\n%s", after)
	}
}

// TestSetupEnvironment runs the built hook with LD_PRELOAD and
// LD_LIBRARY_PATH in its environment and in the container's: the ldconfig
// it starts sees neither.
func TestSetupEnvironment(t *testing.T) {
	dir := t.TempDir()
	bin := hookBin(t)
	envFile := filepath.Join(dir, "env")
	probe := filepath.Join(dir, "ldconfig")
	os.WriteFile(probe, []byte("#!/bin/sh\nenv > "+envFile+"\nexec /sbin/ldconfig \"$@\"\n"), 0o755)
	b, _ := bundle(t)
	cfg := `{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"env":["LD_PRELOAD=/evil.so","LD_LIBRARY_PATH=/evil"]}}`
	os.WriteFile(filepath.Join(b, "config.json"), []byte(cfg), 0o644)
	cmd := exec.Command(bin, append(append([]string{}, setupArgs...), "--ldconfig", probe)...)
	cmd.Env = []string{"LD_PRELOAD=/evil.so", "LD_LIBRARY_PATH=/evil", "PATH=/evil:/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(`{"ociVersion":"1.0.2","id":"c","status":"creating","bundle":"` + b + `"}`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hook: %v %s", err, out)
	}
	env, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "/evil"} {
		if strings.Contains(string(env), bad) {
			t.Errorf("ldconfig saw %s:\n%s", bad, env)
		}
	}
}

// TestDetachProcShared: where the ldconfig child may not have a mount
// namespace of its own (an unprivileged hook outside a user namespace), a
// procfs under the root is refused, not unmounted in the hook's namespace;
// without one there is nothing to do.
func TestDetachProcShared(t *testing.T) {
	root := t.TempDir()
	if err := detachProc(root, false); err != nil {
		t.Fatalf("no procfs under the root: %v", err)
	}
	fakehost.RequireRoot(t, "mounting a procfs in the root")
	proc := filepath.Join(root, "proc")
	os.Mkdir(proc, 0o555)
	if err := unix.Mount("proc", proc, "proc", 0, ""); err != nil {
		t.Fatalf("mount a procfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(proc, unix.MNT_DETACH) })
	err := detachProc(root, false)
	want := "container root " + root + ": a procfs is mounted at " + proc + " and the hook may not make a mount namespace of its own"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %s...", err, want)
	}
	if points, _ := procMounts(proc); len(points) != 1 {
		t.Errorf("the procfs was unmounted in the test's namespace: %v", points)
	}
}

// TestSetupLdConfProcFile: the runtime mounts the container's procfs in
// the root before createContainer hooks, and masks /proc/kmsg only later.
// An ld.so.conf that includes /proc/kmsg would block the hook's read until
// the host logs 1 MiB, taking those messages from the host's own reader;
// tracefs's trace_pipe blocks the same way. Files of the kernel's file
// systems are refused as not regular: /proc/version stands for them here
// (the same check, without taking anything from the host if it failed).
func TestSetupLdConfProcFile(t *testing.T) {
	fakehost.RequireRoot(t, "a procfs mounted in the container root")
	b, root := bundle(t)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("include /proc/version\n"), 0o644)
	proc := filepath.Join(root, "proc")
	os.MkdirAll(proc, 0o555)
	if err := unix.Mount("proc", proc, "proc", 0, ""); err != nil {
		t.Fatalf("mount a procfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(proc, unix.MNT_DETACH) })
	code, stderr := runHook(t, b, setupArgs...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "/proc/version is a file of the kernel's (file system type 0x9fa0), not a regular file; ldconfig reads the folders of the other files only"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q does not say %q", stderr, want)
	}
	if out := ldconfigP(t, root); !strings.Contains(out, "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") {
		t.Errorf("the cache lacks the driver:\n%s", out)
	}
}
