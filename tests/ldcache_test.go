package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// cudaProbe calls the fake libcuda's one function; the loader must find
// libcuda.so.1 for it to start at all.
const cudaProbe = `#include <stdio.h>
int gpuctk_fake_symbol(void);
int main(void) { printf("gpuctk_fake_symbol=%d\n", gpuctk_fake_symbol()); return 0; }
`

// TestPodmanLinkerCache runs a program linked against libcuda.so.1 in a
// real container whose image holds glibc, its ldconfig and its own linker
// cache, made before any driver library existed. The driver's libraries
// live in a folder the loader does not search by default, so the program
// starts only if the hook put them in the cache the loader reads. A valid
// cache is merged into (an entry only the image's cache had survives); a
// corrupt or missing one is rebuilt with ldconfig.
func TestPodmanLinkerCache(t *testing.T) {
	driverRoot, _ := fakeDriverRoot(t, "l40s")
	// Move the libraries where only the driver root's cache finds them, as
	// in driver.TestDiscoverLibraryFallbackWithoutCache.
	other := filepath.Join(driverRoot, "opt/nvidia/lib")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(driverRoot, "etc/ld.so.conf.d/x86_64-linux-gnu.conf"), []byte("/opt/nvidia/lib\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	libs, _ := filepath.Glob(filepath.Join(driverRoot, fakehost.LibDir, "lib*"))
	for _, l := range libs {
		if err := os.Rename(l, filepath.Join(other, filepath.Base(l))); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "ldconfig", "-r", driverRoot)

	vendor := uniqueVendor()
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "l40s", "--driver-root", driverRoot,
		"--hook-path", bin("gpuctk-hook"), "--vendor", vendor, "--output", systemSpecPath(t, vendor), "--config", writeConfig(t, ""))

	libcuda, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	libapp, err := fakehost.SharedObject("libapp.so.1")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "probe.c")
	if err := os.WriteFile(src, []byte(cudaProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(t.TempDir(), "cuda-probe")
	run(t, "gcc", "-o", probe, src, libcuda)

	// image returns a glibc root holding the probe, with a cache its own
	// ldconfig made, which also lists the image's libapp.so.1 from a folder
	// only that cache knows.
	image := func(t *testing.T) string {
		root := filepath.Join(t.TempDir(), "rootfs")
		if err := fakehost.Rootfs(root, fakehost.WithGlibc); err != nil {
			t.Fatal(err)
		}
		copyFile(t, probe, filepath.Join(root, "usr/bin/cuda-probe"), 0o755)
		if err := os.MkdirAll(filepath.Join(root, "opt/app/lib"), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, libapp, filepath.Join(root, "opt/app/lib/libapp.so.1"), 0o755)
		run(t, "ldconfig", "-r", root, "/opt/app/lib")
		return root
	}
	const (
		probeOK  = "gpuctk_fake_symbol=42"
		cudaLine = "libcuda.so.1 (libc6,x86-64) => /opt/nvidia/lib/libcuda.so.1"
		appLine  = "libapp.so.1 (libc6,x86-64) => /opt/app/lib/libapp.so.1"
	)
	script := "/usr/bin/cuda-probe; /sbin/ldconfig -p"

	t.Run("without the device the probe cannot start", func(t *testing.T) {
		out, err := podman(t, image(t), nil, script)
		if err != nil {
			t.Fatalf("podman: %v\n%s", err, out)
		}
		if !strings.Contains(out, "libcuda.so.1: cannot open shared object file") || !strings.Contains(out, appLine) {
			t.Fatalf("the image alone should list libapp and miss libcuda:\n%s", out)
		}
	})

	for _, tc := range []struct {
		name       string
		breakCache func(t *testing.T, cache string)
		merged     bool
	}{
		{"valid cache merged", func(*testing.T, string) {}, true},
		{"corrupt cache rebuilt", func(t *testing.T, cache string) {
			if err := os.WriteFile(cache, []byte("glibc-ld.so.cache1.1 but cut short"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"old format alone rebuilt", func(t *testing.T, cache string) {
			// "ld.so-1.7.0", padding, no entries: a format the hook does not write.
			if err := os.WriteFile(cache, []byte("ld.so-1.7.0\x00\x00\x00\x00\x00"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"no cache made", func(t *testing.T, cache string) {
			if err := os.Remove(cache); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := image(t)
			tc.breakCache(t, filepath.Join(root, "etc/ld.so.cache"))
			out, err := podman(t, root, []string{"--device", vendor + "/gpu=0"}, script)
			if err != nil {
				t.Fatalf("podman: %v\n%s", err, out)
			}
			for _, want := range []string{probeOK, cudaLine} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("inside the container: no %q in\n%s", want, out)
				}
			}
			// Merging keeps what the image's cache had; ldconfig rebuilds
			// from the configured folders only.
			if got := strings.Contains(out, appLine+"\n"); got != tc.merged {
				t.Errorf("image's own entry %q listed: %v, want %v (cache merged, not rebuilt)\n%s", appLine, got, tc.merged, out)
			}
		})
	}
}

// TestRuncUserNamespace runs real runc containers with a user namespace
// (uid and gid mappings, container root = host 100000) and the hook as a
// createContainer hook, in a bundle laid out as containerd lays it out
// (folder 0711, config.json 0644; podman's is unreadable to hooks under
// ID mappings, podman issue 28028). The links and the linker cache the
// hook makes belong to the container's root, so the container sees them
// as its own, and the cache is readable inside: with an image cache
// merged into and with none (ldconfig).
func TestRuncUserNamespace(t *testing.T) {
	lib, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	// runc runs createContainer hooks inside the user namespace, as the
	// mapped root, which must be able to reach the built binary.
	os.Chmod(filepath.Dir(bin("gpuctk-hook")), 0o755)
	const script = `stat -c '%u:%g %a %n' /etc/ld.so.cache /usr/lib/x86_64-linux-gnu/libcuda.so.1; ` +
		`/sbin/ldconfig -p | grep 'libcuda.so.1 '`
	for _, withCache := range []bool{true, false} {
		t.Run(map[bool]string{true: "image cache", false: "no cache"}[withCache], func(t *testing.T) {
			bundle := t.TempDir()
			reachableByMappedRoot(bundle)
			rootfs := libcudaRoot(t, bundle, lib)
			if withCache {
				run(t, "ldconfig", "-r", rootfs)
			}
			ownByMappedRoot(t, rootfs)
			out, err := runcWithLibcudaHook(t, bundle, "gpuctk-userns-", func(spec map[string]any) {
				spec["process"].(map[string]any)["args"] = []string{"/bin/sh", "-c", script}
				withUserNamespace(spec)
			})
			if err != nil {
				t.Fatalf("runc run: %v\n%s", err, out)
			}
			for _, want := range []string{
				"0:0 644 /etc/ld.so.cache",
				"0:0 777 /usr/lib/x86_64-linux-gnu/libcuda.so.1",
				"libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1",
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("inside the container: no %q in\n%s", want, out)
				}
			}
		})
	}
}

// TestRuncLdconfigProcEscape runs real runc containers whose image has no
// linker cache, so the hook falls back to ldconfig, and plants links
// through /proc/1/root: when runc runs createContainer hooks the
// container's procfs is mounted and its pid 1 (runc init) has not pivoted
// yet, so that magic link is the host's root. ldconfig, chrooted into the
// root, must not follow them: no file outside the root changes, and the
// container still gets the driver in its cache.
func TestRuncLdconfigProcEscape(t *testing.T) {
	fakehost.RequireRoot(t, "runc")
	lib, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	host, err := fakehost.SharedObject("libhost.so.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		plant func(rootfs, outside string)
	}{
		{"aux cache folder", func(r, out string) {
			os.MkdirAll(filepath.Join(r, "var/cache"), 0o755)
			os.Symlink("/proc/1/root"+out, filepath.Join(r, "var/cache/ldconfig"))
		}},
		{"ld.so.conf folder", func(r, out string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("/proc/1/root"+out+"\n"), 0o644)
		}},
		{"hwcap subfolder", func(r, out string) {
			os.Symlink("/proc/1/root"+out, filepath.Join(r, "usr/lib/x86_64-linux-gnu/tls"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outside := t.TempDir()
			copyFile(t, host, filepath.Join(outside, "libhost.so.7.1"), 0o755)
			list := func() string {
				out, _ := exec.Command("ls", "-lA", outside).CombinedOutput()
				return string(out)
			}
			before := list()
			bundle := t.TempDir()
			rootfs := libcudaRoot(t, bundle, lib)
			// No cache, and a folder in ld.so.conf: ldconfig rebuilds it.
			os.WriteFile(filepath.Join(rootfs, "etc/ld.so.conf"), []byte("/usr/local/lib\n"), 0o644)
			tc.plant(rootfs, outside)
			out, err := runcWithLibcudaHook(t, bundle, "gpuctk-procescape-", func(spec map[string]any) {
				spec["process"].(map[string]any)["args"] = []string{"/sbin/ldconfig", "-p"}
			})
			if after := list(); after != before {
				t.Errorf("a folder outside the root changed:\n%s\nnow:\n%s", before, after)
			}
			if err != nil {
				t.Fatalf("runc run: %v\n%s", err, out)
			}
			if want := "libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"; !strings.Contains(string(out), want) {
				t.Errorf("inside the container: no %q in\n%s", want, out)
			}
		})
	}
}

// TestRuncHookWithoutState runs real runc containers whose hook's stdin
// is, in place of runc's, a pipe that gives a wrong state (a bundle that
// does not exist) 2 s later. runc writes the state from a goroutine that
// waits for Go's scheduler, milliseconds at times, so a hook whose state
// is not there yet finds the container itself under runc: from the
// folder runc runs it in (the root) and runc's own (the bundle). The
// container gets the driver without the state where the root is the
// bundle's rootfs folder (containerd, Docker) and where it is kept apart
// (podman, CRI-O). In a user namespace the hook cannot read runc's
// folder: a root in the bundle is still found, and for one kept apart
// the hook waits for the state, and the wrong one fails the container
// with the hook's reason.
func TestRuncHookWithoutState(t *testing.T) {
	fakehost.RequireRoot(t, "runc")
	lib, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	// runc runs createContainer hooks inside the user namespace, as the
	// mapped root, which must be able to reach the built binary.
	os.Chmod(filepath.Dir(bin("gpuctk-hook")), 0o755)
	const linked = "libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
	for _, tc := range []struct {
		name          string
		apart, userns bool
		want          string
	}{
		{name: "root in the bundle", want: linked},
		{name: "root apart from the bundle", apart: true, want: linked},
		{name: "root in the bundle, user namespace", userns: true, want: linked},
		{name: "root apart, user namespace", apart: true, userns: true, want: "gpuctk-hook setup: bundle: open /nonexistent-bundle/config.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, elsewhere := t.TempDir(), t.TempDir()
			rootfs := libcudaRoot(t, bundle, lib)
			run(t, "ldconfig", "-r", rootfs)
			if tc.apart {
				apart := filepath.Join(elsewhere, "merged")
				if err := os.Rename(rootfs, apart); err != nil {
					t.Fatal(err)
				}
				rootfs = apart
			}
			if tc.userns {
				reachableByMappedRoot(bundle, elsewhere)
				ownByMappedRoot(t, rootfs)
			}
			out, err := runcWithLibcudaHook(t, bundle, "gpuctk-nostate-", func(spec map[string]any) {
				spec["process"].(map[string]any)["args"] = []string{"/sbin/ldconfig", "-p"}
				if tc.apart {
					spec["root"] = map[string]any{"path": rootfs}
				}
				if tc.userns {
					withUserNamespace(spec)
				}
				// The same hook, exec'd by bash (runc's init stays its
				// parent), its stdin the late, wrong state. The writer
				// lets go of the descriptors runc's init leaves to its
				// hooks (its sync socket, log pipe and exec FIFO): runc
				// waits for every holder of its log pipe.
				h := spec["hooks"].(map[string]any)["createContainer"].([]any)[0].(map[string]any)
				const late = `exec "$0" "$@" < <(exec 2>/dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-; sleep 2; echo '{"ociVersion":"1.0.2","bundle":"/nonexistent-bundle"}')`
				h["args"] = append([]string{"bash", "-c", late, h["path"].(string)}, h["args"].([]string)[1:]...)
				h["path"] = "/bin/bash"
			})
			if fails := tc.want != linked; fails && err == nil {
				t.Fatalf("runc run succeeded though the hook could find no state:\n%s", out)
			} else if !fails && err != nil {
				t.Fatalf("runc run: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("no %q in\n%s", tc.want, out)
			}
		})
	}
}

// mappedRoot is the host ID the user-namespace tests map the
// container's root to.
const mappedRoot = 100000

// reachableByMappedRoot opens each folder above dirs (up to the temp
// folder) to the mapped root, which must reach them: t.TempDir's folders
// are 0700 and the host root's.
func reachableByMappedRoot(dirs ...string) {
	for _, p := range dirs {
		for d := p; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			os.Chmod(d, 0o711)
		}
	}
}

// ownByMappedRoot gives rootfs to the mapped IDs, as an image used with a
// user namespace belongs to them.
func ownByMappedRoot(t *testing.T, rootfs string) {
	t.Helper()
	run(t, "chown", "-R", "-h", fmt.Sprintf("%d:%d", mappedRoot, mappedRoot), rootfs)
}

// withUserNamespace gives spec a user namespace whose root is mappedRoot.
func withUserNamespace(spec map[string]any) {
	linux := spec["linux"].(map[string]any)
	linux["namespaces"] = append(linux["namespaces"].([]any), map[string]any{"type": "user"})
	idmap := []map[string]any{{"containerID": 0, "hostID": mappedRoot, "size": 65536}}
	linux["uidMappings"], linux["gidMappings"] = idmap, idmap
}

// libcudaRoot puts a busybox root in bundle/rootfs with libcuda's
// library file (the fake lib) where the driver has it, and returns it.
func libcudaRoot(t *testing.T, bundle, lib string) string {
	t.Helper()
	rootfs := filepath.Join(bundle, "rootfs")
	os.Rename(busyboxRoot(t, true), rootfs)
	copyFile(t, lib, filepath.Join(rootfs, "usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"), 0o755)
	return rootfs
}

// runcWithLibcudaHook runs bundle's container with runc: runc's default
// config, without a terminal, with the hook linking and caching libcuda
// as a createContainer hook, changed by edit. The container (its ID
// idPrefix and the bundle's name) is deleted after; runc's output is
// returned.
func runcWithLibcudaHook(t *testing.T, bundle, idPrefix string, edit func(spec map[string]any)) ([]byte, error) {
	t.Helper()
	run(t, "runc", "spec", "-b", bundle)
	var spec map[string]any
	data, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec["process"].(map[string]any)["terminal"] = false
	spec["hooks"] = map[string]any{"createContainer": []any{map[string]any{
		"path": bin("gpuctk-hook"),
		"args": []string{"gpuctk-hook", "setup",
			"--link", "libcuda.so.580.65.06::/usr/lib/x86_64-linux-gnu/libcuda.so.1",
			"--library", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
			"--folder", "/usr/lib/x86_64-linux-gnu"},
	}}}
	edit(spec)
	data, _ = json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	id := idPrefix + filepath.Base(bundle)
	out, err := exec.Command("runc", "run", "--bundle", bundle, id).CombinedOutput()
	exec.Command("runc", "delete", "-f", id).Run()
	return out, err
}
