package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	for name, write := range map[string]func(string, []byte, os.FileMode) error{
		"WriteFile": WriteFile, "WriteFileNoSync": WriteFileNoSync,
	} {
		t.Run(name, func(t *testing.T) { testWriteFile(t, write) })
	}
}

func testWriteFile(t *testing.T, WriteFile func(string, []byte, os.FileMode) error) {
	dir := t.TempDir()
	p := filepath.Join(dir, "spec.yaml")
	if err := WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "two" || st.Mode().Perm() != 0o600 {
		t.Fatalf("content %q mode %v", b, st.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
	// A folder that does not exist fails and creates nothing.
	if err := WriteFile(filepath.Join(dir, "no", "x"), nil, 0o644); err == nil {
		t.Fatal("write into a missing folder succeeded")
	}
}

func TestWriteFileInStaysInRoot(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	os.Symlink(outside, filepath.Join(dir, "out"))
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := WriteFileIn(root, "out/x", []byte("x"), 0o644, false); err == nil {
		t.Fatal("a write through a link out of the root succeeded")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("written outside the root: %v", entries)
	}
	// A link at the name itself is replaced, not followed.
	os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dir, "f"))
	if err := WriteFileIn(root, "f", []byte("new"), 0o644, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "new" {
		t.Fatalf("content %q", b)
	}
	if _, err := os.Lstat(filepath.Join(outside, "victim")); err == nil {
		t.Fatal("the link's target was written")
	}
}
