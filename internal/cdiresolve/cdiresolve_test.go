package cdiresolve

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// spec is a small spec of kind vendor.example.com/gpu defining names.
func spec(names ...string) string {
	s := "cdiVersion: \"0.5.0\"\nkind: \"vendor.example.com/gpu\"\ndevices:\n"
	for _, n := range names {
		s += "- name: \"" + n + "\"\n  containerEdits:\n    env: [\"FROM=" + n + "\"]\n"
	}
	return s
}

// matchesLibrary writes files (folder index/name -> content) and checks
// that Load resolves what the CDI library's cache resolves from them:
// the same devices, from the same files, with the same edits, and the
// same files failing to load.
func matchesLibrary(t *testing.T, files map[string]string) {
	t.Helper()
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "0"), filepath.Join(root, "1")}
	for _, d := range dirs {
		os.Mkdir(d, 0o755)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set := Load(dirs)
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if got, want := slices.Sorted(maps.Keys(set.Devices)), cache.ListDevices(); !slices.Equal(got, want) {
		t.Fatalf("devices %q, the library's %q", got, want)
	}
	for name, d := range set.Devices {
		lib := cache.GetDevice(name)
		if set.Path(d.GetSpec()) != lib.GetSpec().GetPath() || !reflect.DeepEqual(d.ContainerEdits, lib.ContainerEdits) {
			t.Errorf("%s: from %s, the library's from %s", name, set.Path(d.GetSpec()), lib.GetSpec().GetPath())
		}
	}
	var failed, libFailed []string
	for _, e := range set.Errors {
		failed = append(failed, e.Path)
	}
	for path, errs := range cache.GetErrors() {
		if slices.ContainsFunc(errs, func(e error) bool { return !strings.HasPrefix(e.Error(), "conflicting device ") }) {
			libFailed = append(libFailed, path)
		}
	}
	slices.Sort(failed)
	slices.Sort(libFailed)
	if !slices.Equal(failed, libFailed) {
		t.Errorf("files not loaded %q, the library's %q", failed, libFailed)
	}
	// Each file the library reports a conflict for has one error here.
	var conflicting, libConflicting []string
	for _, e := range set.Conflicts {
		conflicting = append(conflicting, e.Path)
	}
	for path, errs := range cache.GetErrors() {
		if slices.ContainsFunc(errs, func(e error) bool { return strings.HasPrefix(e.Error(), "conflicting device ") }) {
			libConflicting = append(libConflicting, path)
		}
	}
	slices.Sort(conflicting)
	slices.Sort(libConflicting)
	if !slices.Equal(conflicting, libConflicting) {
		t.Errorf("files with conflicts %q, the library's %q", conflicting, libConflicting)
	}
}

var cases = []struct {
	name  string
	files map[string]string
}{
	{"one spec", map[string]string{"0/a.yaml": spec("0", "1")}},
	{"a later folder wins", map[string]string{"0/a.yaml": spec("0", "1"), "1/b.yaml": spec("1", "2")}},
	{"one folder: neither", map[string]string{"0/a.yaml": spec("0", "1"), "0/b.json": spec("1", "2")}},
	{"three in one folder", map[string]string{"0/a.yaml": spec("0"), "0/b.yaml": spec("0"), "0/c.yaml": spec("0", "1")}},
	// The library drops a name defined twice in an earlier folder even
	// where a later folder defines it once.
	{"a conflict below hides the later folder's", map[string]string{"0/a.yaml": spec("0"), "0/b.yaml": spec("0"), "1/c.yaml": spec("0", "1")}},
	{"a conflict above", map[string]string{"0/a.yaml": spec("0"), "1/b.yaml": spec("0"), "1/c.yaml": spec("0")}},
	{"broken files", map[string]string{"0/a.yaml": "", "0/b.yaml": "cdiVersion: [", "0/c.json": "{}", "1/d.yaml": spec("0"), "1/e.yaml": "cdiVersion: \"0.5.0\"\nkind: \"x\"\n"}},
	{"invalid name", map[string]string{"0/a.yaml": spec("bad name"), "1/b.yaml": spec("0")}},
	{"other extensions are not read", map[string]string{"0/a.yml": "garbage", "0/b.yaml.bak": "garbage", "1/c.yaml": spec("0")}},
}

func TestLoadMatchesLibrary(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { matchesLibrary(t, tc.files) })
	}
}

// FuzzLoadMatchesLibrary: whatever the specs, Load resolves as the
// library does.
func FuzzLoadMatchesLibrary(f *testing.F) {
	for _, tc := range cases {
		f.Add(tc.files["0/a.yaml"], tc.files["0/b.yaml"]+tc.files["0/b.json"], tc.files["1/c.yaml"]+tc.files["1/b.yaml"])
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		matchesLibrary(t, map[string]string{"0/a.yaml": a, "0/b.json": b, "1/c.yaml": c})
	})
}

// TestUnfitFilesSkipped: a FIFO, a device and an oversized file beside a
// spec are one error each, naming what they are, and the spec's devices
// still resolve.
func TestUnfitFilesSkipped(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte(spec("0")), 0o644)
	if err := mkfifo(filepath.Join(dir, "fifo.yaml")); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/dev/zero", filepath.Join(dir, "zero.json"))
	os.WriteFile(filepath.Join(dir, "huge.yaml"), nil, 0o644)
	os.Truncate(filepath.Join(dir, "huge.yaml"), 1<<30)
	errs, _, devices := Resolve([]string{dir})
	want := []string{
		filepath.Join(dir, "fifo.yaml") + ": a FIFO, not a spec file: skipped (CDI runtimes that read it block or fail: remove it)",
		filepath.Join(dir, "huge.yaml") + ": over the 8 MiB a spec may have: skipped (CDI runtimes that read it run out of memory: remove it)",
		filepath.Join(dir, "zero.json") + ": a character device, not a spec file: skipped (CDI runtimes that read it block or fail: remove it)",
	}
	if !slices.Equal(errs, want) {
		t.Errorf("errors:\n%s\nwant\n%s", strings.Join(errs, "\n"), strings.Join(want, "\n"))
	}
	if len(devices) != 1 || devices[0].Name != "vendor.example.com/gpu=0" {
		t.Errorf("devices %+v", devices)
	}
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }

// TestErrorBounded: a spec refused for a name of megabytes gives an error
// of a line, not megabytes.
func TestErrorBounded(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(spec(strings.Repeat("x", 2<<20)+" bad")), 0o644)
	errs, _, _ := Resolve([]string{dir})
	if len(errs) != 1 || len(errs[0]) > 1200 || !strings.Contains(errs[0], " bytes more)") {
		t.Errorf("%d errors, the first %d bytes: %.300s", len(errs), len(errs[0]), errs[0])
	}
}
