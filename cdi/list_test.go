package cdi

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/internal/cdiresolve"
)

// sameNames writes files specs into a new folder, each defining the same
// names devices (another vendor's tool run many times, or copies).
func sameNames(t testing.TB, files, names int) string {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("cdiVersion: \"0.5.0\"\nkind: \"other.example.com/gpu\"\ndevices:\n")
	for i := range names {
		fmt.Fprintf(&b, "- name: \"dev%d\"\n  containerEdits:\n    env: [\"N=%d\"]\n", i, i)
	}
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("spec-%03d.yaml", i)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestManySpecsSameNames: 150 files defining the same 500 names (which
// took `cdi generate` 4-6 s and 230 MiB, every pair of files for every
// name) make one conflict naming them all, in one bounded line; the
// runtime's entry stays small (it held an error per name per pair, over
// the 16 MiB the runtime reads back); and the work is linear: twice the
// files cost about twice the memory, not four times.
func TestManySpecsSameNames(t *testing.T) {
	dir := sameNames(t, 150, 500)
	_, conflicts, errs, err := List([]string{dir})
	if err != nil || len(errs) != 0 {
		t.Fatalf("List: %v %v", err, errs)
	}
	if len(conflicts) != 1 || len(conflicts[0].Files) != 150 || len(conflicts[0].Names) != 500 {
		t.Fatalf("%d conflicts, want 1 of 150 files and 500 names", len(conflicts))
	}
	line := conflicts[0].String()
	want := filepath.Join(dir, "spec-000.yaml") + ", " + filepath.Join(dir, "spec-001.yaml") + ", " + filepath.Join(dir, "spec-002.yaml") +
		" and 147 more all define 500 device names (other.example.com/gpu=dev0, other.example.com/gpu=dev1, other.example.com/gpu=dev10 and 497 more)"
	if line != want {
		t.Errorf("conflict line:\n%s\nwant\n%s", line, want)
	}

	entry, err := cdiresolve.Entry([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the runtime's entry: %d KiB", len(entry)>>10)
	if len(entry) > 256<<10 {
		t.Errorf("the runtime's entry takes %d KiB, want under 256 KiB", len(entry)>>10)
	}
	for l := range strings.SplitSeq(string(entry), "\n") {
		if len(l) > 4096 && !strings.HasPrefix(l, "spec\t") {
			t.Errorf("entry line of %d bytes: %.200s", len(l), l)
			break
		}
	}
	errors, _, devices := cdiresolve.Resolve([]string{dir})
	if len(errors) != 150 || len(devices) != 0 {
		t.Errorf("%d errors (want one per file), %d devices (want none: all conflict)", len(errors), len(devices))
	}

	// The grouping alone, as the parsing costs the same per file
	// however it goes: pairs of files cost four times as much for twice
	// the files.
	small, large := cdiresolve.Load([]string{sameNames(t, 20, 500)}), cdiresolve.Load([]string{sameNames(t, 40, 500)})
	a := allocated(func() { conflictsOf(small) })
	b := allocated(func() { conflictsOf(large) })
	t.Logf("grouping conflicts: %d KiB for 20 files, %d KiB for 40", a>>10, b>>10)
	if ratio := float64(b) / float64(a); ratio > 2.5 {
		t.Errorf("grouping conflicts allocates %d KiB for 20 files and %d KiB for 40: %.1f times as much, want about twice", a>>10, b>>10, ratio)
	}
}
