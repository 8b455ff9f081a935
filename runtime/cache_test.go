package runtime

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// evilEdits are device edits planted in the cache: they must never reach
// a container.
const evilEdits = cacheFormat + "\nspec\t0\tnvidia.com/gpu\t{}\ndevice\tnvidia.com/gpu=mig-0\t0\t" +
	`{"env":["EVIL=1"],"mounts":[{"hostPath":"/","containerPath":"/host"}]}` + "\nend\n"

// TestHostileCache: whatever is planted at or in the cache folder, create
// gives the container its devices, as without a cache, follows no link out
// of the folder, removes nothing it did not write, and does not hang.
func TestHostileCache(t *testing.T) {
	// The reference: the same create with no cache at all.
	ref := newFixture(t, withEnv("mig-0"))
	ref.rt.cfg.Runtime.CacheDir = ""
	if err := runWithin(t, ref); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(ref.config)

	tests := []struct {
		name string
		root bool // needs root: files of another user
		// plant gets the cache folder and an entry of it that a first
		// create wrote (empty when before is false); it returns a check.
		before bool
		plant  func(t *testing.T, cache, entry string) func(t *testing.T)
	}{
		{name: "folder is a symlink", plant: func(t *testing.T, cache, _ string) func(t *testing.T) {
			target := t.TempDir()
			os.Symlink(target, cache)
			return func(t *testing.T) {
				if entries, _ := os.ReadDir(target); len(entries) != 0 {
					t.Errorf("wrote %v through a symlinked cache folder", entries)
				}
			}
		}},
		{name: "folder is a file", plant: func(t *testing.T, cache, _ string) func(t *testing.T) {
			os.WriteFile(cache, []byte("x"), 0o600)
			return func(t *testing.T) {
				if data, _ := os.ReadFile(cache); string(data) != "x" {
					t.Errorf("file at the cache path became %q", data)
				}
			}
		}},
		{name: "folder of another user", root: true, plant: func(t *testing.T, cache, _ string) func(t *testing.T) {
			os.Mkdir(cache, 0o700)
			os.Chown(cache, 65534, 65534)
			return func(t *testing.T) {
				if entries, _ := os.ReadDir(cache); len(entries) != 0 {
					t.Errorf("wrote %v into another user's folder", entries)
				}
			}
		}},
		{name: "garbage beside the entries", plant: func(t *testing.T, cache, _ string) func(t *testing.T) {
			os.Mkdir(cache, 0o700)
			os.WriteFile(filepath.Join(cache, "garbage"), []byte("x"), 0o600)
			syscall.Mkfifo(filepath.Join(cache, "fifo"), 0o600)
			os.MkdirAll(filepath.Join(cache, "junk", "devices"), 0o700)
			os.WriteFile(filepath.Join(cache, "junk", "devices", "a.json"), nil, 0o600)
			// An old entry, by its name, holding a file the cache never writes.
			old := filepath.Join(cache, strings.Repeat("0", 32))
			os.MkdirAll(filepath.Join(old, "devices"), 0o700)
			os.WriteFile(filepath.Join(old, "devices", "a.json"), nil, 0o600)
			os.WriteFile(filepath.Join(old, "devices", "notes.txt"), nil, 0o600)
			return func(t *testing.T) {
				for _, p := range []string{"garbage", "fifo", "junk/devices/a.json", strings.Repeat("0", 32) + "/devices/notes.txt"} {
					if _, err := os.Lstat(filepath.Join(cache, p)); err != nil {
						t.Errorf("%s was removed: %v", p, err)
					}
				}
				if _, err := os.Lstat(filepath.Join(old, "devices", "a.json")); err == nil {
					t.Error("the old entry's own file stayed")
				}
			}
		}},
		{name: "entry is a symlink out", before: true, plant: func(t *testing.T, _, entry string) func(t *testing.T) {
			evil := filepath.Join(t.TempDir(), "evil")
			os.WriteFile(evil, []byte(evilEdits), 0o600)
			os.Remove(entry)
			os.Symlink(evil, entry)
			return func(t *testing.T) {
				if fi, err := os.Lstat(entry); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("the symlinked entry was not replaced: %v, %v", fi, err)
				}
				if data, _ := os.ReadFile(evil); string(data) != evilEdits {
					t.Error("the symlink's target changed")
				}
			}
		}},
		{name: "entry is a FIFO", before: true, plant: func(t *testing.T, _, entry string) func(t *testing.T) {
			os.Remove(entry)
			syscall.Mkfifo(entry, 0o600)
			return func(*testing.T) {}
		}},
		{name: "entry is garbage", before: true, plant: func(t *testing.T, _, entry string) func(t *testing.T) {
			os.WriteFile(entry, []byte("\x00{garbage"), 0o600)
			return func(*testing.T) {}
		}},
		{name: "entry cut short", before: true, plant: func(t *testing.T, _, entry string) func(t *testing.T) {
			// As a crash may leave it: the device's line gone, so that a
			// reader trusting it would call mig-0 unknown.
			data, _ := os.ReadFile(entry)
			os.WriteFile(entry, data[:len(cacheFormat)+1], 0o600)
			return func(*testing.T) {}
		}},
		{name: "entry is a folder", before: true, plant: func(t *testing.T, _, entry string) func(t *testing.T) {
			// The first format's entry, or a planted folder.
			os.Remove(entry)
			os.MkdirAll(filepath.Join(entry, "devices"), 0o700)
			os.WriteFile(filepath.Join(entry, "devices", "nvidia.com%2Fgpu=mig-0.json"), []byte("{}"), 0o600)
			os.WriteFile(filepath.Join(entry, "index.json"), []byte("{}"), 0o600)
			return func(t *testing.T) {
				if fi, err := os.Lstat(entry); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("the folder was not replaced by an entry: %v, %v", fi, err)
				}
			}
		}},
		{name: "entry of another user", root: true, before: true, plant: func(t *testing.T, cache, entry string) func(t *testing.T) {
			os.WriteFile(entry, []byte(evilEdits), 0o600)
			os.Chown(entry, 65534, 65534)
			return func(*testing.T) {}
		}},
		{name: "mode 0777", before: true, plant: func(t *testing.T, cache, _ string) func(t *testing.T) {
			os.Chmod(cache, 0o777)
			return func(t *testing.T) {
				if fi, _ := os.Stat(cache); fi.Mode().Perm() != 0o700 {
					t.Errorf("cache folder mode %v, want 0700", fi.Mode().Perm())
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("needs root: plants files owned by another user (uid 65534)")
			}
			f := newFixture(t, withEnv("mig-0"))
			orig, _ := os.ReadFile(f.config)
			cache := f.rt.cfg.Runtime.CacheDir
			var entry string
			if tt.before {
				if err := runWithin(t, f); err != nil {
					t.Fatal(err)
				}
				entries, _ := os.ReadDir(cache)
				if len(entries) != 1 {
					t.Fatalf("cache holds %v, want one entry", entries)
				}
				entry = filepath.Join(cache, entries[0].Name())
				os.WriteFile(f.config, orig, 0o600)
			}
			check := tt.plant(t, cache, entry)
			// Twice: the first may replace what it found, the second reads
			// what the first left.
			for range 2 {
				if err := runWithin(t, f); err != nil {
					t.Fatalf("create: %v", err)
				}
				if got, _ := os.ReadFile(f.config); !bytes.Equal(got, want) {
					t.Fatalf("config.json differs from a create without cache:\n%s\nwant\n%s", got, want)
				}
				os.WriteFile(f.config, orig, 0o600)
			}
			check(t)
		})
	}
}

// TestMappedEntryCutShort: an entry cut short while it is mapped (by hand:
// the cache renames whole entries into place) makes reading it fault; that
// must count as an entry that cannot answer, not crash the create.
func TestMappedEntryCutShort(t *testing.T) {
	dir := t.TempDir()
	// Long enough that the device's line lies pages past the cut.
	entry := cacheFormat + "\nspec\t0\tnvidia.com/gpu\t{\"env\":[\"" + strings.Repeat("A", 3*os.Getpagesize()) + "=1\"]}\n" +
		"device\tnvidia.com/gpu=mig-0\t0\t{\"env\":[\"B=1\"]}\nend\n"
	if err := os.WriteFile(filepath.Join(dir, "entry"), []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	data, release, err := mapCacheFile(root, "entry")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	req := &request{devices: []string{"nvidia.com/gpu=mig-0"}}
	edits, ok, err := mappedEdits(data, req, []string{dir}, "nvidia.com/gpu")
	if !ok || err != nil || len(edits) != 1 || len(edits[0].Env) != 2 {
		t.Fatalf("whole entry: edits %v, ok %v, err %v", edits, ok, err)
	}
	// Its first page stays: the head still reads as an entry's.
	if err := os.Truncate(filepath.Join(dir, "entry"), int64(os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	if edits, ok, err := mappedEdits(data, req, []string{dir}, "nvidia.com/gpu"); ok || err != nil || edits != nil {
		t.Fatalf("entry cut short under its mapping: edits %v, ok %v, err %v; want an entry that cannot answer", edits, ok, err)
	}
}

// TestCreateWithEntryCutShortWhileMapped: an entry cut short between its
// mapping and its reading (by hand, or another tool) must not crash the
// create (SIGBUS) wherever its bytes are first touched: the create gets
// the devices as without a cache, and the entry is rewritten.
func TestCreateWithEntryCutShortWhileMapped(t *testing.T) {
	f := newFixture(t, withEnv("mig-0"))
	orig, _ := os.ReadFile(f.config)
	if err := runWithin(t, f); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(f.config)
	os.WriteFile(f.config, orig, 0o600)
	f.rt.mapEntry = func(r *os.Root, name string) ([]byte, func(), error) {
		data, release, err := mapCacheFile(r, name)
		if err == nil {
			f, err := r.OpenFile(name, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Truncate(0)
			f.Close()
		}
		return data, release, err
	}
	if err := runWithin(t, f); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, _ := os.ReadFile(f.config); !bytes.Equal(got, want) {
		t.Errorf("config.json differs from a create with a whole entry:\n%s\nwant\n%s", got, want)
	}
	entries, _ := os.ReadDir(f.rt.cfg.Runtime.CacheDir)
	if len(entries) != 1 {
		t.Fatalf("cache holds %v, want one entry", entries)
	}
	if data, _ := os.ReadFile(filepath.Join(f.rt.cfg.Runtime.CacheDir, entries[0].Name())); !whole(data) {
		t.Errorf("the entry cut short was not rewritten: %q", data)
	}
}

// TestEntryTooLargeNotWritten: an entry the runtime would not read back
// (over maxCacheFile) is not written, and says so; one at the bound is,
// and maps back.
func TestEntryTooLargeNotWritten(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	const fp = "0123456789abcdef0123456789abcdef"
	if err := writeCache(root, fp, make([]byte, maxCacheFile+1), true); !errors.Is(err, errTooLarge) {
		t.Errorf("over the bound: %v, want errTooLarge", err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("over the bound: %d files written", len(names))
	}
	if err := writeCache(root, fp, make([]byte, maxCacheFile), true); err != nil {
		t.Fatal(err)
	}
	data, release, err := mapCacheFile(root, fp)
	if err != nil || len(data) != maxCacheFile {
		t.Fatalf("at the bound: %d bytes mapped back, %v", len(data), err)
	}
	release()
}
