package hook

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

const libDir = "/usr/lib/x86_64-linux-gnu"

// bundle makes an OCI bundle whose root holds libcuda.so.<ver>, as the
// spec's mount would, and returns the bundle and root paths.
func bundle(t *testing.T) (string, string) {
	t.Helper()
	b := t.TempDir()
	root := filepath.Join(b, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, libDir), 0o755); err != nil {
		t.Fatal(err)
	}
	obj, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(obj)
	os.WriteFile(filepath.Join(root, libDir, "libcuda.so.580.65.06"), data, 0o755)
	cfg, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"}})
	os.WriteFile(filepath.Join(b, "config.json"), cfg, 0o644)
	return b, root
}

func runHook(t *testing.T, bundleDir string, args ...string) (int, string) {
	t.Helper()
	return runHookWith(t, false, bundleDir, args...)
}

// runHookWith is runHook, walking folders through os.Root, as on kernels
// without openat2, when osRoot is set.
func runHookWith(t *testing.T, osRoot bool, bundleDir string, args ...string) (int, string) {
	t.Helper()
	st, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": bundleDir})
	var stderr bytes.Buffer
	code := mainEnv(&Env{Stdin: bytes.NewReader(st), Stderr: &stderr, osRoot: osRoot}, args)
	return code, stderr.String()
}

var setupArgs = []string{"setup",
	"--link", "libcuda.so.580.65.06::" + libDir + "/libcuda.so.1",
	"--link", "libcuda.so.1::" + libDir + "/libcuda.so",
	"--folder", libDir}

func TestSetup(t *testing.T) {
	b, root := bundle(t)
	if code, stderr := runHook(t, b, setupArgs...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// libcuda.so.1 leads to the image's file; libcuda.so is another name
	// of that link.
	for link, want := range map[string]string{"libcuda.so.1": "libcuda.so.580.65.06", "libcuda.so": "libcuda.so.580.65.06"} {
		got, err := os.Readlink(filepath.Join(root, libDir, link))
		if err != nil || got != want {
			t.Errorf("%s -> %q, %v; want %q", link, got, err, want)
		}
	}
	sameFile(t, root, libDir+"/libcuda.so", libDir+"/libcuda.so.1")
	out, err := exec.Command(DefaultLdconfig, "-p", "-C", filepath.Join(root, "etc/ld.so.cache")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") {
		t.Fatalf("ldconfig -p: %v\n%s", err, out)
	}
	// Running again (a restarted container) changes nothing and succeeds.
	if code, stderr := runHook(t, b, setupArgs...); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
}

func TestSetupHostileRoot(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		plant   func(root string)
		wantErr bool
	}{
		// The library folder is a link out of the root: the links must not
		// land outside.
		{"lib folder links outside", func(root string) {
			os.RemoveAll(filepath.Join(root, libDir))
			os.Symlink(outside, filepath.Join(root, libDir))
		}, true},
		// The image's libcuda.so.1 is a link to a host file: it is replaced,
		// the host file is untouched.
		{"link points outside", func(root string) {
			os.Symlink(filepath.Join(outside, "victim"), filepath.Join(root, libDir, "libcuda.so.1"))
		}, false},
		// /etc links outside: the cache must not be written there.
		{"etc links outside", func(root string) {
			os.Symlink(outside, filepath.Join(root, "etc"))
		}, true},
		{"etc links to /proc/self/root", func(root string) {
			os.Symlink("/proc/self/root/tmp", filepath.Join(root, "etc"))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(filepath.Join(outside, "victim"), []byte("host file"), 0o644)
			b, root := bundle(t)
			tc.plant(root)
			code, stderr := runHook(t, b, setupArgs...)
			if (code != 0) != tc.wantErr {
				t.Errorf("exit %d, stderr %q; want failure %v", code, stderr, tc.wantErr)
			}
			if code != 0 && strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("error is more than one line: %q", stderr)
			}
			entries, _ := os.ReadDir(outside)
			if len(entries) != 1 {
				t.Errorf("files appeared outside the root: %v", entries)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "host file" {
				t.Errorf("host file changed: %q", b)
			}
		})
	}
}

// imageCache gives the bundle's root a linker cache of its own, written by
// the real ldconfig over a library of the image, as a glibc image has.
func imageCache(t *testing.T, root string) []byte {
	t.Helper()
	obj, err := fakehost.SharedObject("libimage.so.3")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(obj)
	os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/lib/libimage.so.3"), data, 0o755)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	// The image's cache predates the driver library, which arrives by a
	// mount at container creation.
	lib, aside := filepath.Join(root, libDir, "libcuda.so.580.65.06"), filepath.Join(t.TempDir(), "lib")
	os.Rename(lib, aside)
	defer os.Rename(aside, lib)
	if out, err := exec.Command(DefaultLdconfig, "-r", root, "/usr/lib").CombinedOutput(); err != nil {
		t.Fatalf("ldconfig: %v %s", err, out)
	}
	cache, _ := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	return cache
}

func ldconfigP(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command(DefaultLdconfig, "-p", "-C", filepath.Join(root, "etc/ld.so.cache")).CombinedOutput()
	if err != nil {
		t.Fatalf("ldconfig -p: %v\n%s", err, out)
	}
	return string(out)
}

func TestSetupMergesCache(t *testing.T) {
	b, root := bundle(t)
	before := imageCache(t, root)
	// No ldconfig at all: the merge must not need one.
	args := append(append([]string{}, setupArgs...), "--library", libDir+"/libcuda.so.1", "--library", libDir+"/libcuda.so", "--ldconfig", "/nonexistent/ldconfig")
	if code, stderr := runHook(t, b, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	after, _ := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if string(after) == string(before) {
		t.Fatal("cache unchanged")
	}
	out := ldconfigP(t, root)
	for _, want := range []string{
		"3 libs found in cache",
		"libimage.so.3 (libc6,x86-64) => /usr/lib/libimage.so.3",
		"libcuda.so.1 (libc6,x86-64) => " + libDir + "/libcuda.so.1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ldconfig -p has no %q:\n%s", want, out)
		}
	}
	// The merged cache lists what ldconfig itself would have written.
	os.Remove(filepath.Join(root, "etc/ld.so.cache"))
	if out, err := exec.Command(DefaultLdconfig, "-r", root, "/usr/lib", libDir).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig: %v %s", err, out)
	}
	if byLdconfig := ldconfigP(t, root); byLdconfig != out {
		t.Errorf("merged cache differs from the one ldconfig writes for the same libraries:\n%s\nldconfig:\n%s", out, byLdconfig)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "etc")); len(entries) != 1 {
		t.Errorf("temp files left in /etc: %v", entries)
	}
}

func TestSetupCacheFallback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache []byte
	}{
		{"corrupt", []byte("glibc-ld.so.cache1.1\x00\x00\x00garbage")},
		{"foreign format", []byte("ld.so-1.7.0\x00\x00\x00\x00\x00")},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), tc.cache, 0o644)
			args := append(append([]string{}, setupArgs...), "--library", libDir+"/libcuda.so.1")
			if code, stderr := runHook(t, b, append(args, "--ldconfig", "/nonexistent/ldconfig")...); code == 0 || !strings.Contains(stderr, "/nonexistent/ldconfig") {
				t.Fatalf("without ldconfig: exit %d, %q; want the fallback to try ldconfig", code, stderr)
			}
			if code, stderr := runHook(t, b, args...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if out := ldconfigP(t, root); !strings.Contains(out, "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") {
				t.Errorf("ldconfig -p:\n%s", out)
			}
		})
	}
}

func TestSetupCacheHostile(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "ld.so.cache")
	b, root := bundle(t)
	cache := imageCache(t, root)
	os.WriteFile(victim, cache, 0o644)
	os.Remove(filepath.Join(root, "etc/ld.so.cache"))
	os.Symlink(victim, filepath.Join(root, "etc/ld.so.cache"))
	args := append(append([]string{}, setupArgs...), "--library", libDir+"/libcuda.so.1")
	// The link is never followed: the cache is rebuilt in its place.
	code, stderr := runHook(t, b, args...)
	if code != 0 || !strings.Contains(stderr, "/etc/ld.so.cache is a symbolic link, not a regular file; rebuilt it with ldconfig") {
		t.Errorf("exit %d, %q: want the link replaced by a rebuilt cache, with a warning", code, stderr)
	}
	if got, _ := os.ReadFile(victim); string(got) != string(cache) {
		t.Error("the host file the image's cache links to was changed")
	}
	if out := ldconfigP(t, root); !strings.Contains(out, "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") {
		t.Errorf("ldconfig -p:\n%s", out)
	}
}

// TestSetupConcurrentSameRoot runs many hooks at once on one root, as for
// containers sharing a root file system: with no cache (ldconfig path) and
// with one (merge path), every run succeeds.
func TestSetupConcurrentSameRoot(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		b, root := bundle(t)
		if withCache {
			imageCache(t, root)
		}
		args := append(append([]string{}, setupArgs...), "--library", libDir+"/libcuda.so.1", "--library", libDir+"/libcuda.so")
		var wg sync.WaitGroup
		errs := make(chan string, 20)
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if code, stderr := runHook(t, b, args...); code != 0 {
					errs <- stderr
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("cache %v: %s", withCache, e)
		}
		if out := ldconfigP(t, root); !strings.Contains(out, "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") {
			t.Errorf("ldconfig -p:\n%s", out)
		}
	}
}

// TestSetupRootLockedForGood: a process of a container sharing the root
// flocks its "/" and never lets go; the hook gives up in one line once
// its wait is over instead of waiting for good.
func TestSetupRootLockedForGood(t *testing.T) {
	b, root := bundle(t)
	f, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(map[string]any{"bundle": b})
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Setup(&Env{Stdin: bytes.NewReader(st), Stderr: &stderr},
			SetupOptions{Folders: []string{libDir}, Limits: Limits{Lock: 200 * time.Millisecond}})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "container root: lock: held by another process for over 200ms") {
			t.Fatalf("err = %v, want the lock's wait over", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hook still waits for the lock after 5s")
	}
}

// TestSetupNoImageCache: an image with no linker cache gets one written by
// the hook when it names no library folders of its own (ldconfig is never
// run), and one from ldconfig when its ld.so.conf names some.
func TestSetupNoImageCache(t *testing.T) {
	args := append(append([]string{}, setupArgs...), "--library", libDir+"/libcuda.so.1", "--library", libDir+"/libcuda.so")
	noLdconfig := append(append([]string{}, args...), "--ldconfig", "/nonexistent/ldconfig")
	for _, tc := range []struct {
		name, conf string
		ldconfig   bool // the hook must run ldconfig
	}{
		{name: "no ld.so.conf"},
		{name: "empty ld.so.conf", conf: "# nothing\n"},
		{name: "ld.so.conf naming a folder", conf: "/usr/local/lib\n", ldconfig: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			os.MkdirAll(filepath.Join(root, "etc"), 0o755)
			if tc.conf != "" {
				os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte(tc.conf), 0o644)
			}
			code, stderr := runHook(t, b, noLdconfig...)
			if tc.ldconfig {
				if code == 0 || !strings.Contains(stderr, "/nonexistent/ldconfig") {
					t.Fatalf("exit %d, %q; want ldconfig tried", code, stderr)
				}
				if code, stderr = runHook(t, b, args...); code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
			} else if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			out := ldconfigP(t, root)
			for _, want := range []string{
				"libcuda.so.1 (libc6,x86-64) => " + libDir + "/libcuda.so.1",
				"libcuda.so (libc6,x86-64) => " + libDir + "/libcuda.so",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("ldconfig -p has no %q:\n%s", want, out)
				}
			}
			if written := strings.Contains(out, "Cache generated by: gpuctk-hook"); written == tc.ldconfig {
				t.Errorf("cache written by the hook: %v, want %v:\n%s", written, !tc.ldconfig, out)
			}
			// ld.so.cache (and ld.so.conf): no temp files left.
			want := 1
			if tc.conf != "" {
				want = 2
			}
			if entries, _ := os.ReadDir(filepath.Join(root, "etc")); len(entries) != want {
				t.Errorf("/etc holds %v", entries)
			}
		})
	}
}
