package ldcache

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
)

const x8664 = FlagELFLibc6 | FlagX8664Lib64

// TestAddMatchesLdconfig is the strongest check of the sort order: it adds
// libraries with awkward names to a cache of this machine's own library
// folders and requires the very bytes that ldconfig writes when it scans
// the same folders plus the one holding those libraries.
func TestAddMatchesLdconfig(t *testing.T) {
	need(t, "ldconfig", "unshare")
	dir := t.TempDir()
	libdir := filepath.Join(dir, "drv/lib")
	sonames := []string{
		// What a driver ships.
		"libcuda.so.1", "libcudadebugger.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1",
		"libnvidia-nvvm.so.4", "libnvidia-gpucomp.so.580.65.06", "libnvidia-glcore.so.580.65.06",
		"libnvidia-pkcs11-openssl3.so.580.65.06", "libGLX_nvidia.so.0", "libEGL_nvidia.so.0",
		"libGLESv1_CM_nvidia.so.1", "libGLESv2_nvidia.so.2", "libnvcuvid.so.1", "libnvoptix.so.1",
		// Neighbours of the host's names, digit runs, case, punctuation.
		"libc.so.7", "libz.so.2", "libzz.so.1", "libm.so.5", "libfoo.so.9", "libfoo.so.10",
		"libfoo.so.100", "libfoo2.so.1", "libfoo10.so.1", "libA.so.1", "liba.so.1", "libx-1.so",
		"libx_1.so", "libx.1.so", "lib3d.so.1", "libd3.so.1", "libbig.so.99999999999", "libbig.so.2",
		"lib\xc3\xa9.so.1", "libstdc++.so.7",
	}
	b := newLibBuilder(t, "merge")
	for _, s := range sonames {
		b.write(libdir, s, s+".0.0")
	}
	hostConf, err := os.ReadFile("/etc/ld.so.conf")
	if err != nil {
		t.Fatal(err)
	}
	baseConf, fullConf := filepath.Join(dir, "base.conf"), filepath.Join(dir, "full.conf")
	if err := os.WriteFile(baseConf, hostConf, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fullConf, append(bytes.Clone(hostConf), "\n"+libdir+"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	baseCache, fullCache := filepath.Join(dir, "base.cache"), filepath.Join(dir, "full.cache")
	ldconfigIsolated(t, "-X", "-f", baseConf, "-C", baseCache)
	ldconfigIsolated(t, "-X", "-f", fullConf, "-C", fullCache)

	c, _ := mustParseFile(t, baseCache)
	var add []Entry
	for _, s := range slices.Backward(sonames) {
		if got := c.Lookup(s); len(got) > 0 {
			t.Fatalf("%s is already in this machine's cache (%v): pick another name", s, got)
		}
		add = append(add, Entry{Flags: x8664, Key: s, Value: filepath.Join(libdir, s)})
	}
	c.Add(add...)
	got, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	wantCache, want := mustParseFile(t, fullCache)
	if !bytes.Equal(got, want) {
		gotCache, err := Parse(got)
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("Add+Marshal differs from ldconfig's cache: %s\n%s", firstDiff(got, want), diffLines(render(gotCache, "x"), render(wantCache, "x")))
	}
	checkKeepingStrings(t, c, wantCache)
}

// checkKeepingStrings checks that MarshalKeepingStrings writes a cache
// that reads as want, for this package and for ldconfig -p.
func checkKeepingStrings(t *testing.T, c, want *Cache) {
	t.Helper()
	kept, err := c.MarshalKeepingStrings()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(kept)
	if err != nil {
		t.Fatalf("MarshalKeepingStrings wrote what Parse refuses: %v", err)
	}
	if g, w := render(got, "x"), render(want, "x"); g != w {
		t.Errorf("MarshalKeepingStrings: %s", diffLines(g, w))
	}
	path := filepath.Join(t.TempDir(), "kept.cache")
	if err := os.WriteFile(path, kept, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, w := run(t, "ldconfig", "-p", "-C", path), render(want, path); out != w {
		t.Errorf("ldconfig -p of MarshalKeepingStrings' cache: %s", diffLines(out, w))
	}
}

// TestAddHWCapsMatchesLdconfig merges glibc-hwcaps entries and a folder
// from ld.so.conf into a root's cache and compares with what ldconfig -r
// writes for the root holding those libraries.
func TestAddHWCapsMatchesLdconfig(t *testing.T) {
	need(t, "ldconfig")
	type lib struct{ dir, soname, file string }
	const usrlib = "/usr/lib/x86_64-linux-gnu"
	image := []lib{
		{usrlib, "libfoo.so.1", "libfoo.so.1.0.0"},
		{usrlib + "/glibc-hwcaps/x86-64-v2", "libfoo.so.1", "libfoo.so.1.0.0"},
		{usrlib, "libbar.so.9", "libbar.so.9"},
		{usrlib + "/glibc-hwcaps/x86-64-v3", "libbar.so.9", "libbar.so.9"},
	}
	driver := []lib{
		// Added in this order, each lands on the far side of the one before.
		{"/opt/gpu/lib/glibc-hwcaps/x86-64-v4", "libfoo.so.1", "libfoo.so.1.2.3"},
		{"/opt/gpu/lib/glibc-hwcaps/x86-64-v3", "libfoo.so.1", "libfoo.so.1.2.3"},
		{"/opt/gpu/lib", "libfoo.so.1", "libfoo.so.1.2.3"},
		{"/opt/gpu/lib", "libcuda.so.1", "libcuda.so.580.65.06"},
	}
	b := newLibBuilder(t, "hwcaps")
	mkroot := func(libs []lib) string {
		root := t.TempDir()
		for _, l := range libs {
			b.write(filepath.Join(root, l.dir), l.soname, l.file)
		}
		// An empty glibc-hwcaps folder: ldconfig stores its name all the same.
		for _, d := range []string{usrlib + "/glibc-hwcaps/x86-64-v4", "etc"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("/opt/gpu/lib\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, "ldconfig", "-X", "-r", root)
		return root
	}
	base := mkroot(image)
	full := mkroot(append(slices.Clone(image[2:]), driver...))

	c, _ := mustParseFile(t, filepath.Join(base, "etc/ld.so.cache"))
	var add []Entry
	for _, l := range driver {
		e := Entry{Flags: x8664, Key: l.soname, Value: filepath.Join(l.dir, l.soname)}
		if sub, ok := strings.CutPrefix(l.dir, "/opt/gpu/lib/glibc-hwcaps/"); ok {
			// ldconfig records the file itself in glibc-hwcaps folders.
			e.Value = filepath.Join(l.dir, l.file)
			i := slices.Index(c.HWCaps, sub)
			if i < 0 {
				c.HWCaps = append(c.HWCaps, sub)
				i = len(c.HWCaps) - 1
			}
			e.HWCap = HWCapExtension | uint64(i)
		}
		add = append(add, e)
	}
	c.Add(add...)
	got, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	wantCache, want := mustParseFile(t, filepath.Join(full, "etc/ld.so.cache"))
	if !bytes.Equal(got, want) {
		gotCache, err := Parse(got)
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("Add+Marshal differs from ldconfig's cache: %s\n%s", firstDiff(got, want), diffLines(render(gotCache, "x"), render(wantCache, "x")))
	}
	checkKeepingStrings(t, c, wantCache)
}

// TestMergedCacheLoads writes a merged cache into a root that holds glibc
// and checks that the root's own dynamic loader and ldconfig use it: a
// program needing a library found only through the cache runs, and one
// whose library the image also ships picks the added one.
func TestMergedCacheLoads(t *testing.T) {
	need(t, "gcc", "ldconfig", "chroot")
	root := t.TempDir()
	copyFile := func(src, dst string) {
		t.Helper()
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dst), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		t.Fatal(err)
	}
	copyFile("/lib64/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2")
	copyFile("/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")
	copyFile(ldconfig, "/sbin/ldconfig")
	for _, d := range []string{"etc", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// The image ships its own libfoo.so.1 in a default folder; the driver
	// brings another, and libgpu.so.1, in a folder no configuration names.
	newLibBuilder(t, "image libfoo").write(filepath.Join(root, "usr/lib/x86_64-linux-gnu"), "libfoo.so.1", "libfoo.so.1.0.0")
	newLibBuilder(t, "driver libfoo").write(filepath.Join(root, "opt/gpu/lib"), "libfoo.so.1", "libfoo.so.1.2.3")
	newLibBuilder(t, "driver libgpu").write(filepath.Join(root, "opt/gpu/lib"), "libgpu.so.1", "libgpu.so.580.65.06")
	src := filepath.Join(t.TempDir(), "main.c")
	if err := os.WriteFile(src, []byte("void foo(void);\nint main(void) { foo(); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "gcc", "-o", filepath.Join(root, "usr/bin/foo"), src, filepath.Join(root, "opt/gpu/lib/libfoo.so.1"))
	run(t, "gcc", "-o", filepath.Join(root, "usr/bin/gpu"), src, filepath.Join(root, "opt/gpu/lib/libgpu.so.1"))

	// The image's own cache, as its ldconfig left it.
	run(t, "ldconfig", "-X", "-r", root)
	chroot := func(args ...string) (string, error) {
		out, err := exec.Command("chroot", append([]string{root}, args...)...).CombinedOutput()
		return string(out), err
	}
	programs := []struct {
		prog, before, after string
	}{
		{"/usr/bin/foo", "image libfoo\n", "driver libfoo\n"},
		{"/usr/bin/gpu", "libgpu.so.1: cannot open shared object file", "driver libgpu\n"},
	}
	for _, p := range programs {
		out, _ := chroot(p.prog)
		if !strings.Contains(out, p.before) {
			t.Fatalf("before the merge, %s printed %q, want %q", p.prog, out, p.before)
		}
	}

	cachePath := filepath.Join(root, "etc/ld.so.cache")
	imageCache, err := os.ReadFile(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	// The hook also starts from an empty cache, for an image that has none
	// and no ld.so.conf folders: libc, which it does not list, must still
	// be found in the loader's default folders.
	for _, marshal := range []struct {
		name  string
		f     func(*Cache) ([]byte, error)
		empty bool
	}{{"Marshal", (*Cache).Marshal, false}, {"MarshalKeepingStrings", (*Cache).MarshalKeepingStrings, false},
		{"empty cache, Marshal", (*Cache).Marshal, true}, {"empty cache, MarshalKeepingStrings", (*Cache).MarshalKeepingStrings, true}} {
		t.Run(marshal.name, func(t *testing.T) {
			c, err := Parse(imageCache)
			if marshal.empty {
				c = &Cache{Generator: "gpuctk-hook"}
			}
			if err != nil {
				t.Fatal(err)
			}
			c.Add(
				Entry{Flags: x8664, Key: "libfoo.so.1", Value: "/opt/gpu/lib/libfoo.so.1"},
				Entry{Flags: x8664, Key: "libgpu.so.1", Value: "/opt/gpu/lib/libgpu.so.1"},
			)
			data, err := marshal.f(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := atomicfile.WriteFile(cachePath, data, 0o644); err != nil {
				t.Fatal(err)
			}
			checkMerged(t, c, cachePath, chroot, programs)
		})
	}
}

// checkMerged checks that the programs load the driver's libraries
// through the merged cache at cachePath, which ldconfig -p lists as c.
func checkMerged(t *testing.T, c *Cache, cachePath string, chroot func(...string) (string, error), programs []struct{ prog, before, after string }) {
	t.Helper()
	for _, p := range programs {
		out, err := chroot(p.prog)
		if err != nil || out != p.after {
			t.Errorf("after the merge, %s printed %q (%v), want %q", p.prog, out, err, p.after)
		}
		list, err := chroot("/lib64/ld-linux-x86-64.so.2", "--list", p.prog)
		if err != nil || !strings.Contains(list, " => /opt/gpu/lib/") {
			t.Errorf("ld.so --list %s: %v\n%s", p.prog, err, list)
		}
	}
	want := render(c, "/etc/ld.so.cache")
	if out, err := chroot("/sbin/ldconfig", "-p"); err != nil || out != want {
		t.Errorf("the image's ldconfig -p (%v): %s", err, diffLines(out, want))
	}
	if out := run(t, "ldconfig", "-p", "-C", cachePath); out != strings.Replace(want, "/etc/ld.so.cache", cachePath, 1) {
		t.Errorf("ldconfig -p -C: %s", diffLines(out, want))
	}
	if !strings.Contains(want, "libgpu.so.1 (libc6,x86-64) => /opt/gpu/lib/libgpu.so.1\n") || strings.Contains(want, "/usr/lib/x86_64-linux-gnu/libfoo.so.1") {
		t.Errorf("merged cache:\n%s", want)
	}
}

// TestMerge compares Merge with Parse, Add and MarshalKeepingStrings on
// the caches of this package's tests and this machine's, and checks that
// the loader's view of the result, ldconfig -p, has the added libraries.
func TestMerge(t *testing.T) {
	need(t, "ldconfig")
	files := []string{"testdata/new.cache", "testdata/compat.cache", "/etc/ld.so.cache"}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name    string
			entries []Entry
		}{
			{"driver", driverEntries},
			{"driver twice", append(slices.Clone(driverEntries), driverEntries...)},
			{"replacing", pickEntries(0x1f)},
			{"glibc-hwcaps", pickEntries(0x41)},
			{"none", nil},
		} {
			t.Run(filepath.Base(file)+"/"+tc.name, func(t *testing.T) {
				got, err := Merge(data, tc.entries...)
				want, wantErr := mergeSlow(data, tc.entries)
				if wantErr != nil {
					// A glibc-hwcaps index past the cache's names.
					if err == nil || errors.Is(err, ErrFormat) {
						t.Fatalf("Merge: %v; the slower path: %v", err, wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("Merge differs from Parse, Add and MarshalKeepingStrings: %s", firstDiff(got, want))
				}
				// The merge once more, as a restarted container's hook
				// does: the same bytes.
				again, err := Merge(got, tc.entries...)
				if err != nil {
					t.Fatal(err)
				}
				if want, _ := mergeSlow(got, tc.entries); !bytes.Equal(again, want) {
					t.Fatalf("second merge differs: %s", firstDiff(again, want))
				}
				path := filepath.Join(t.TempDir(), "merged.cache")
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				out := run(t, "ldconfig", "-p", "-C", path)
				for _, e := range tc.entries {
					if e.HWCap == 0 && !strings.Contains(out, e.Key+" (") || !strings.Contains(out, "=> "+e.Value+"\n") {
						t.Errorf("ldconfig -p of the merged cache lacks %s => %s:\n%s", e.Key, e.Value, out)
					}
				}
			})
		}
	}
	// Refusals: what Parse refuses, wrapping ErrFormat; what Marshal
	// refuses, not.
	data, err := os.ReadFile("testdata/new.cache")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Merge(data[:100], driverEntries...); !errors.Is(err, ErrFormat) {
		t.Errorf("Merge of a truncated cache: %v, want ErrFormat", err)
	}
	for _, pick := range []uint16{0x80, 0x100} {
		if _, err := Merge(data, pickEntries(pick)...); err == nil || errors.Is(err, ErrFormat) {
			t.Errorf("Merge of %+v: %v, want an error other than ErrFormat", pickEntries(pick), err)
		}
	}
}
