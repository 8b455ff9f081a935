package atomicfile

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	// A FIFO (as a device or a socket) is refused, not renamed over.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(fifo, []byte("x"), 0o644); err == nil || err.Error() != "write "+fifo+": it is a FIFO, not a file: name a file to write" {
		t.Errorf("write over a FIFO: %v", err)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v", err)
	}
	// A link is replaced, as before: the spec dirs' files are ours.
	link := filepath.Join(dir, "link")
	os.Symlink("spec.yaml", link)
	if err := WriteFile(link, []byte("three"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("link: %v, %v", fi, err)
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

// A file already at the temporary name (planted, or left by a crash) is
// left alone and another name is tried; after four taken names the write
// fails without touching the target.
func TestWriteFileTakenTempName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		taken   int // how many names in a row exist
		wantErr bool
	}{
		{"first name taken", 1, false},
		{"three taken", 3, false},
		{"all four taken", 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "ld.so.cache")
			if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			n := uint64(0)
			counter := func() uint64 { n++; return n }
			for i := 1; i <= tc.taken; i++ {
				planted := filepath.Join(dir, fmt.Sprintf(".ld.so.cache.tmp-%012x", i))
				if err := os.WriteFile(planted, []byte("planted"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := writePath(p, []byte("new"), 0o644, true, counter, nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			want := "new"
			if tc.wantErr {
				want = "old"
			}
			if b, _ := os.ReadFile(p); string(b) != want {
				t.Errorf("target holds %q, want %q", b, want)
			}
			for i := 1; i <= tc.taken; i++ {
				b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf(".ld.so.cache.tmp-%012x", i)))
				if string(b) != "planted" {
					t.Errorf("planted file %d now holds %q", i, b)
				}
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1+tc.taken {
				t.Errorf("%d entries in the folder, want %d (no temporary file left)", len(entries), 1+tc.taken)
			}
		})
	}
}

func TestWriteFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		plant   func(t *testing.T, path string) // at the second file's path
		wantErr string                          // "" when both are written
	}{
		{"both written", nil, ""},
		{"a folder at the second", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "it is a folder, not a file: name a file to write (none of the 2 files written)"},
		{"a FIFO at the second", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a file: name a file to write (none of the 2 files written)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a, b := filepath.Join(dir, "a.toml"), filepath.Join(dir, "b.toml")
			if err := os.WriteFile(a, []byte("old a"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.plant != nil {
				tc.plant(t, b)
			}
			before, _ := os.ReadDir(dir)
			err := WriteFiles([]File{{Path: a, Data: []byte("new a"), Mode: 0o644}, {Path: b, Data: []byte("new b"), Mode: 0o644}})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				for p, want := range map[string]string{a: "new a", b: "new b"} {
					got, _ := os.ReadFile(p)
					fi, _ := os.Stat(p)
					if string(got) != want || fi.Mode().Perm() != 0o644 {
						t.Errorf("%s holds %q, mode %v", p, got, fi.Mode())
					}
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), "write "+b+": ") || !strings.HasSuffix(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one about %s ending %q", err, b, tc.wantErr)
			}
			if got, _ := os.ReadFile(a); string(got) != "old a" {
				t.Errorf("the first file holds %q: written although the second failed", got)
			}
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Errorf("temporary files left: %v", after)
			}
		})
	}
}

// TestWriteFilesFewDescriptors: 300 files in one folder and 100 in
// folders of their own are written all or none by a process allowed 64
// descriptors (a child: the limit is the process's).
func TestWriteFilesFewDescriptors(t *testing.T) {
	if dir := os.Getenv("ATOMICFILE_NOFILE_DIR"); dir != "" {
		lim := syscall.Rlimit{Cur: 64, Max: 64}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		var files []File
		for i := range 300 {
			files = append(files, File{Path: filepath.Join(dir, fmt.Sprintf("key-%d.toml", i)), Data: []byte("x"), Mode: 0o644})
		}
		for i := range 100 {
			sub := filepath.Join(dir, fmt.Sprintf("sub%d", i))
			files = append(files, File{Path: filepath.Join(sub, "config.toml"), Data: []byte("y"), Mode: 0o644})
		}
		if os.Getenv("ATOMICFILE_NOFILE_FAIL") != "" {
			// The last file's folder is missing: nothing is written.
			files = append(files, File{Path: filepath.Join(dir, "missing", "x"), Data: nil, Mode: 0o644})
		}
		if err := WriteFiles(files); err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		return
	}
	for _, fail := range []bool{false, true} {
		dir := t.TempDir()
		for i := range 100 {
			if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("sub%d", i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriteFilesFewDescriptors$", "-test.count=1")
		cmd.Env = append(os.Environ(), "ATOMICFILE_NOFILE_DIR="+dir)
		if fail {
			cmd.Env = append(cmd.Env, "ATOMICFILE_NOFILE_FAIL=1")
		}
		out, err := cmd.CombinedOutput()
		entries, _ := os.ReadDir(dir)
		sub, _ := os.ReadDir(filepath.Join(dir, "sub99"))
		if !fail {
			if err != nil || len(entries) != 400 || len(sub) != 1 {
				t.Errorf("under 64 descriptors: %v, %d entries, %d in sub99\n%s", err, len(entries), len(sub), out)
			}
			continue
		}
		if err == nil || len(entries) != 100 || len(sub) != 0 || !strings.Contains(string(out), "(none of the 401 files written)") {
			t.Errorf("a failing set under 64 descriptors: %v, %d entries, %d in sub99\n%s", err, len(entries), len(sub), out)
		}
	}
}

// TestReclaim: whatever appears at a path of the caller's own is replaced
// by the file, in one step, and never followed.
func TestReclaim(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, was string
		make      func(p string) error
	}{
		{"nothing", "", func(string) error { return nil }},
		{"file", "", func(p string) error { return os.WriteFile(p, []byte("old"), 0o600) }},
		{"FIFO", "a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"link out", "a symbolic link", func(p string) error { return os.Symlink(outside, p) }},
		{"folder", "a folder", func(p string) error {
			if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
				return err
			}
			return os.Symlink(filepath.Dir(outside), filepath.Join(p, "sub", "link"))
		}},
		{"socket", "a socket", func(p string) error {
			l, err := net.Listen("unix", p)
			if err == nil {
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "nvidia.yaml")
			if err := tc.make(p); err != nil {
				t.Fatal(err)
			}
			was, err := Reclaim(p, []byte("spec"), 0o644)
			if err != nil || was != tc.was {
				t.Fatalf("Reclaim = %q, %v; want %q", was, err, tc.was)
			}
			if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
				t.Fatalf("not a 0644 file after: %v %v", fi, err)
			}
			if b, _ := os.ReadFile(p); string(b) != "spec" {
				t.Errorf("content %q", b)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("left beside: %v", entries)
			}
			if b, _ := os.ReadFile(outside); string(b) != "host" {
				t.Errorf("the file outside changed: %q", b)
			}
		})
	}
}
