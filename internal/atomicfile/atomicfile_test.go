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
