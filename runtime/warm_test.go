package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWarmCache: a spec just written into a spec dir is cached by
// WarmCache, so the create after it reads the cache; where the spec is
// not the runtime's, or the runtime has no cache yet, or the specs change
// while they are read, nothing is written.
func TestWarmCache(t *testing.T) {
	// A spec as gpuctk writes it, which the runtime reads itself, and
	// one of another's writing, which takes the library.
	own, err := os.ReadFile("../cdi/testdata/h100.yaml")
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.ReadFile("testdata/cdi/nvidia.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec := own
	// setup gives a fixture whose only spec dir holds spec, written just
	// now.
	setup := func(t *testing.T, makeCache bool) (*fixture, string) {
		f := newFixture(t, withEnv("0")) // in both specs
		dir := t.TempDir()
		path := filepath.Join(dir, "nvidia.yaml")
		if err := os.WriteFile(path, spec, 0o644); err != nil {
			t.Fatal(err)
		}
		f.rt.cfg.CDI.SpecDirs = []string{dir}
		f.rt.level = "debug"
		if makeCache {
			if err := os.Mkdir(f.rt.cfg.Runtime.CacheDir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		return f, path
	}
	create := func(t *testing.T, f *fixture) string {
		t.Helper()
		before, _ := os.ReadFile(f.log)
		if err := f.rt.Run([]string{"create", "--bundle", f.bundle, "ctr1"}); err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(f.log)
		return string(after[len(before):])
	}
	const miss = "device cache: no entry"

	for _, tc := range []struct {
		name    string
		spec    []byte
		resolve func([]string) ([]byte, error)
	}{
		{"gpuctk's spec", own, nil},
		{"another's spec, through the library", other, libraryResolver},
	} {
		t.Run("the next create reads the cache: "+tc.name, func(t *testing.T) {
			spec = tc.spec
			// The reference: the same create, cold.
			ref, _ := setup(t, true)
			create(t, ref)
			want, _ := os.ReadFile(ref.config)

			f, path := setup(t, true)
			warmed, err := WarmCache(f.rt.cfg, path, tc.resolve)
			if err != nil || !warmed {
				t.Fatalf("WarmCache = %v, %v; want true", warmed, err)
			}
			if log := create(t, f); strings.Contains(log, miss) || !strings.Contains(log, "injected") {
				t.Errorf("create after WarmCache missed the cache:\n%s", log)
			}
			if got, _ := os.ReadFile(f.config); !bytes.Equal(got, want) {
				t.Errorf("config.json after a warmed create:\n%s\nafter a cold one:\n%s", got, want)
			}
		})
	}
	spec = own

	t.Run("without it, a miss", func(t *testing.T) {
		f, _ := setup(t, true)
		if log := create(t, f); !strings.Contains(log, miss) {
			t.Errorf("the first create found an entry:\n%s", log)
		}
	})

	t.Run("no cache folder: none made", func(t *testing.T) {
		f, path := setup(t, false)
		if warmed, err := WarmCache(f.rt.cfg, path, nil); err != nil || warmed {
			t.Fatalf("WarmCache = %v, %v; want false", warmed, err)
		}
		if _, err := os.Lstat(f.rt.cfg.Runtime.CacheDir); err == nil {
			t.Error("WarmCache made the cache folder")
		}
	})

	t.Run("a spec outside the spec dirs", func(t *testing.T) {
		f, _ := setup(t, true)
		other := filepath.Join(t.TempDir(), "nvidia.yaml")
		os.WriteFile(other, spec, 0o644)
		if warmed, err := WarmCache(f.rt.cfg, other, nil); err != nil || warmed {
			t.Fatalf("WarmCache = %v, %v; want false", warmed, err)
		}
	})

	t.Run("specs changed while read", func(t *testing.T) {
		f, path := setup(t, true)
		// Two specs: the library's resolver reads them, and another
		// spec lands meanwhile.
		os.WriteFile(filepath.Join(filepath.Dir(path), "other.yaml"), []byte("cdiVersion: 0.5.0\nkind: example.com/x\ndevices:\n- name: a\n  containerEdits:\n    env: [A=1]\n"), 0o644)
		resolve := func(dirs []string) ([]byte, error) {
			os.WriteFile(filepath.Join(dirs[0], "late.yaml"), []byte("cdiVersion: 0.5.0\nkind: example.com/y\ndevices:\n- name: b\n  containerEdits:\n    env: [B=1]\n"), 0o644)
			return libraryResolver(dirs)
		}
		if warmed, err := WarmCache(f.rt.cfg, path, resolve); err != nil || warmed {
			t.Fatalf("WarmCache = %v, %v; want false", warmed, err)
		}
		if entries, _ := os.ReadDir(f.rt.cfg.Runtime.CacheDir); len(entries) != 0 {
			t.Errorf("cached specs that changed while they were read: %v", entries)
		}
	})
}
