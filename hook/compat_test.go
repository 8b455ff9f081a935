package hook

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"590.12.01", "580.65.06", 1},
		{"580.65.06", "580.65.06", 0},
		{"580.100.1", "580.99.1", 1}, // numeric, not text
		{"1000.1", "999.1", 1},
		{"580.65", "580.65.0", 0},
		{"570.124.06", "580.65.06", -1},
	} {
		a, okA := parseVersion(tc.a)
		b, okB := parseVersion(tc.b)
		if !okA || !okB {
			t.Fatalf("parseVersion(%q, %q) refused", tc.a, tc.b)
		}
		if got := compareVersions(a, b); got != tc.want {
			t.Errorf("compareVersions(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	for _, bad := range []string{"", "580", "580.", "a.b", "580.65.06.1.2", "1234567890.1", "580.-1", "580.6 5", strings.Repeat("9", 250) + ".1"} {
		if _, ok := parseVersion(bad); ok {
			t.Errorf("parseVersion(%q) accepted", bad)
		}
	}
}

// writeLib writes a real shared object with that SONAME at root/dir/file.
func writeLib(t *testing.T, root, dir, file, soname string) {
	t.Helper()
	obj, err := fakehost.SharedObject(soname)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(obj)
	os.MkdirAll(filepath.Join(root, dir), 0o755)
	if err := os.WriteFile(filepath.Join(root, dir, file), data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// compatFolder lays out NVIDIA's cuda-compat package of a driver version
// in dir: libcuda and the PTX JIT compiler with their SONAME links.
func compatFolder(t *testing.T, root, dir, version string) {
	t.Helper()
	for base, soname := range map[string]string{"libcuda": "libcuda.so.1", "libnvidia-ptxjitcompiler": "libnvidia-ptxjitcompiler.so.1"} {
		file := base + ".so." + version
		writeLib(t, root, dir, file, soname)
		os.Symlink(file, filepath.Join(root, dir, soname))
	}
	os.Symlink("libcuda.so.1", filepath.Join(root, dir, "libcuda.so"))
}

// resolved returns, in the order the loader tries them, where the cache
// sends each SONAME.
func resolved(t *testing.T, root, soname string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(ldconfigP(t, root), "\n") {
		l = strings.TrimSpace(l)
		if name, rest, ok := strings.Cut(l, " "); ok && name == soname {
			_, p, _ := strings.Cut(rest, "=> ")
			out = append(out, p)
		}
	}
	return out
}

var compatArgs = append(append([]string{}, setupArgs...),
	"--library", libDir+"/libcuda.so.1", "--library", libDir+"/libcuda.so")

// TestCUDACompat runs the hook over images with and without compat
// libraries, on the merge path (the image has a cache) and the ldconfig
// path (it has none): the compat libraries come first exactly when they
// are of a newer driver branch than the host's and the spec asks for it.
func TestCUDACompat(t *testing.T) {
	driver := libDir + "/libcuda.so.1"
	compat := CompatDir + "/libcuda.so.1"
	for _, tc := range []struct {
		name    string
		plant   func(t *testing.T, root string)
		host    string // --cuda-compat; empty: not passed
		want    []string
		wantJIT []string
	}{
		{"newer branch", func(t *testing.T, r string) { compatFolder(t, r, CompatDir, "590.12.01") }, "580.65.06",
			[]string{compat, driver}, []string{CompatDir + "/libnvidia-ptxjitcompiler.so.1"}},
		{"not asked for (GPU without forward compatibility)", func(t *testing.T, r string) { compatFolder(t, r, CompatDir, "590.12.01") }, "",
			[]string{driver}, nil},
		{"same branch, newer", func(t *testing.T, r string) { compatFolder(t, r, CompatDir, "580.99.01") }, "580.65.06",
			[]string{driver}, nil},
		{"equal", func(t *testing.T, r string) { compatFolder(t, r, CompatDir, "580.65.06") }, "580.65.06",
			[]string{driver}, nil},
		{"older", func(t *testing.T, r string) { compatFolder(t, r, CompatDir, "570.124.06") }, "580.65.06",
			[]string{driver}, nil},
		{"numeric, not text (1000 > 999)", func(t *testing.T, r string) { compatFolder(t, r, CompatDir, "1000.1.1") }, "999.1.1",
			[]string{compat, driver}, []string{CompatDir + "/libnvidia-ptxjitcompiler.so.1"}},
		// The CUDA images' layout: absolute links, resolved in the root.
		{"through /etc/alternatives", func(t *testing.T, r string) {
			compatFolder(t, r, "usr/local/cuda-13.0/compat", "590.12.01")
			os.MkdirAll(filepath.Join(r, "etc/alternatives"), 0o755)
			os.Symlink("/usr/local/cuda-13.0", filepath.Join(r, "etc/alternatives/cuda"))
			os.Symlink("/etc/alternatives/cuda", filepath.Join(r, "usr/local/cuda"))
		}, "580.65.06", []string{compat, driver}, []string{CompatDir + "/libnvidia-ptxjitcompiler.so.1"}},
		{"no compat folder", func(t *testing.T, r string) {}, "580.65.06", []string{driver}, nil},
	} {
		for _, withCache := range []bool{true, false} {
			name := tc.name + map[bool]string{true: ", merge", false: ", ldconfig"}[withCache]
			t.Run(name, func(t *testing.T) {
				b, root := bundle(t)
				tc.plant(t, root)
				if withCache {
					imageCache(t, root)
				}
				args := compatArgs
				if tc.host != "" {
					args = append(append([]string{}, args...), "--cuda-compat", tc.host)
				}
				if code, stderr := runHook(t, b, args...); code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				if got := resolved(t, root, "libcuda.so.1"); strings.Join(got, " ") != strings.Join(tc.want, " ") {
					t.Errorf("libcuda.so.1 resolves to %v, want %v", got, tc.want)
				}
				if got := resolved(t, root, "libnvidia-ptxjitcompiler.so.1"); strings.Join(got, " ") != strings.Join(tc.wantJIT, " ") {
					t.Errorf("libnvidia-ptxjitcompiler.so.1 resolves to %v, want %v", got, tc.wantJIT)
				}
			})
		}
	}
}

// TestCUDACompatMatchesLdconfig: the merged cache with compat libraries
// first lists, for ldconfig -p (and so for the loader), what ldconfig
// writes scanning the compat folder first. (The bytes differ: the hook
// keeps the image's string table and appends the new names.)
func TestCUDACompatMatchesLdconfig(t *testing.T) {
	b, root := bundle(t)
	compatFolder(t, root, CompatDir, "590.12.01")
	imageCache(t, root)
	if code, stderr := runHook(t, b, append(append([]string{}, compatArgs...), "--cuda-compat", "580.65.06")...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	mergedP := ldconfigP(t, root)
	if out, err := exec.Command(DefaultLdconfig, "-X", "-r", root, CompatDir, "/usr/lib", libDir).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig: %v %s", err, out)
	}
	if want := ldconfigP(t, root); mergedP != want {
		t.Errorf("merged cache differs from ldconfig's:\n%s\nldconfig:\n%s", mergedP, want)
	}
}

// TestCUDACompatHostile plants what an image controls in the compat
// folder: the hook stays inside the root, never opens a FIFO, and bounds
// its work; each case ends fast with the driver's libcuda in use.
func TestCUDACompatHostile(t *testing.T) {
	outside := t.TempDir()
	compatFolder(t, outside, "compat", "590.12.01")
	before := snapshot(t, outside)
	long := "libcuda.so.9" + strings.Repeat("9", 200) + ".1"
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, root string)
		want  string // the first libcuda.so.1
	}{
		{"compat folder a link out of the root", func(t *testing.T, r string) {
			os.MkdirAll(filepath.Join(r, "usr/local/cuda"), 0o755)
			os.Symlink(filepath.Join(outside, "compat"), filepath.Join(r, CompatDir))
		}, libDir + "/libcuda.so.1"},
		{"compat folder a relative escape", func(t *testing.T, r string) {
			os.MkdirAll(filepath.Join(r, "usr/local/cuda"), 0o755)
			os.Symlink("../../../../../../../../../.."+outside+"/compat", filepath.Join(r, CompatDir))
		}, libDir + "/libcuda.so.1"},
		{"a FIFO named libcuda.so.999.1", func(t *testing.T, r string) {
			os.MkdirAll(filepath.Join(r, CompatDir), 0o755)
			syscall.Mkfifo(filepath.Join(r, CompatDir, "libcuda.so.999.1"), 0o644)
		}, libDir + "/libcuda.so.1"},
		{"FIFOs among real compat libraries", func(t *testing.T, r string) {
			compatFolder(t, r, CompatDir, "590.12.01")
			syscall.Mkfifo(filepath.Join(r, CompatDir, "libcuda.so.999.1"), 0o644)
			syscall.Mkfifo(filepath.Join(r, CompatDir, "libnvidia-nvvm.so.4"), 0o644)
		}, CompatDir + "/libcuda.so.1"},
		{"a 200-digit version", func(t *testing.T, r string) {
			os.MkdirAll(filepath.Join(r, CompatDir), 0o755)
			os.WriteFile(filepath.Join(r, CompatDir, long), []byte("x"), 0o644)
		}, libDir + "/libcuda.so.1"},
		{"garbage as libcuda", func(t *testing.T, r string) {
			os.MkdirAll(filepath.Join(r, CompatDir), 0o755)
			os.WriteFile(filepath.Join(r, CompatDir, "libcuda.so.590.1.1"), []byte("not an ELF file"), 0o644)
			os.Symlink("libcuda.so.590.1.1", filepath.Join(r, CompatDir, "libcuda.so.1"))
		}, libDir + "/libcuda.so.1"},
		{"garbage as libcuda beside a real compat library", func(t *testing.T, r string) {
			compatFolder(t, r, CompatDir, "590.12.01")
			os.WriteFile(filepath.Join(r, CompatDir, "libcuda.so.590.12.01"), []byte("not an ELF file"), 0o644)
		}, libDir + "/libcuda.so.1"},
		{"10,000 files", func(t *testing.T, r string) {
			compatFolder(t, r, CompatDir, "590.12.01")
			for i := range 10000 {
				os.WriteFile(filepath.Join(r, CompatDir, fmt.Sprintf("libx%d.so.1", i)), nil, 0o644)
			}
		}, libDir + "/libcuda.so.1"},
		{"100 libraries", func(t *testing.T, r string) {
			compatFolder(t, r, CompatDir, "590.12.01")
			for i := range 100 {
				writeLib(t, r, CompatDir, fmt.Sprintf("libx%d.so.1", i), "libx.so.1")
			}
		}, libDir + "/libcuda.so.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			tc.plant(t, root)
			imageCache(t, root)
			start := time.Now()
			code, stderr := runHook(t, b, append(append([]string{}, compatArgs...), "--cuda-compat", "580.65.06")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
			if got := resolved(t, root, "libcuda.so.1"); len(got) == 0 || got[0] != tc.want {
				t.Errorf("libcuda.so.1 resolves to %v, want %s first", got, tc.want)
			}
			// The compat libraries come with their libcuda or not at all.
			jit := resolved(t, root, "libnvidia-ptxjitcompiler.so.1")
			if inCompat := len(jit) > 0 && strings.HasPrefix(jit[0], CompatDir); inCompat != (tc.want != libDir+"/libcuda.so.1") {
				t.Errorf("libnvidia-ptxjitcompiler.so.1 resolves to %v with libcuda.so.1 from %s", jit, tc.want)
			}
			if after := snapshot(t, outside); after != before {
				t.Errorf("the folder outside the root changed")
			}
		})
	}
}

// TestCUDACompatOpensOnlyFiles: a FIFO or a device named like a library in
// the compat folder is never opened (a device's open may act on the host:
// a watchdog starts, a tape rewinds). A FIFO shows it: a writer waiting on
// it is let through by any open for reading.
func TestCUDACompatOpensOnlyFiles(t *testing.T) {
	for _, name := range []string{"libnvidia-nvvm.so.4", "libx.so.1", "libcuda.so"} {
		t.Run(name, func(t *testing.T) {
			b, root := bundle(t)
			compatFolder(t, root, CompatDir, "590.12.01")
			fifo := filepath.Join(root, CompatDir, name)
			os.Remove(fifo)
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Fatal(err)
			}
			opened := make(chan struct{})
			go func() {
				if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					f.Close()
				}
				close(opened)
			}()
			imageCache(t, root)
			code, stderr := runHook(t, b, append(append([]string{}, compatArgs...), "--cuda-compat", "580.65.06")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			select {
			case <-opened:
				t.Fatalf("the hook opened the FIFO %s", name)
			case <-time.After(100 * time.Millisecond):
			}
			// Let the writer go.
			if f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				<-opened
				f.Close()
			}
			if got := resolved(t, root, "libcuda.so.1"); len(got) == 0 || got[0] != CompatDir+"/libcuda.so.1" {
				t.Errorf("libcuda.so.1 resolves to %v, want the compat one first", got)
			}
		})
	}
}
