package runtime

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuctk/gpuctk/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fixture is a bundle, a fake real runtime and a Runtime whose exec
// records what it would have run.
type fixture struct {
	bundle, config, log, runc string
	calls                     [][]string
	rt                        *Runtime
}

func newFixture(t testing.TB, edit func(*specs.Spec)) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{bundle: filepath.Join(dir, "bundle"), log: filepath.Join(dir, "gpuctk-runtime.log"), runc: filepath.Join(dir, "runc")}
	f.config = filepath.Join(f.bundle, "config.json")
	if err := os.Mkdir(f.bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.runc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var s specs.Spec
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		edit(&s)
		if data, err = json.MarshalIndent(&s, "", "\t"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(f.config, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cdiDir, err := filepath.Abs("testdata/cdi")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.CDI.SpecDirs = []string{cdiDir, filepath.Join(dir, "no-such-dir")}
	cfg.Runtime.Runtimes = []string{filepath.Join(dir, "no-crun"), f.runc}
	cfg.Runtime.LogFile = f.log
	cfg.Runtime.CacheDir = filepath.Join(dir, "cache")
	f.rt = New(WithConfig(cfg), WithResolver(libraryResolver), WithExec(func(path string, argv, env []string) error {
		if path != f.runc {
			t.Errorf("exec %s, want %s", path, f.runc)
		}
		f.calls = append(f.calls, argv)
		return nil
	}))
	return f
}

func withEnv(v string) func(*specs.Spec) {
	return func(s *specs.Spec) { s.Process.Env = append(s.Process.Env, EnvVar+"="+v) }
}

func TestCreateInjects(t *testing.T) {
	tests := []struct {
		name string
		edit func(*specs.Spec)
		log  string
	}{
		{"env-mig", withEnv("mig-0"), "injected nvidia.com/gpu=mig-0 (from NVIDIA_VISIBLE_DEVICES)"},
		{"env-replica", withEnv("0::1"), "injected nvidia.com/gpu=0::1 (from NVIDIA_VISIBLE_DEVICES)"},
		{"env-none", withEnv("none"), "injected the driver of nvidia.com/gpu without devices"},
		{"annotation", func(s *specs.Spec) {
			s.Annotations = map[string]string{"cdi.k8s.io/nvidia-device-plugin_mig-0": "nvidia.com/gpu=mig-0,nvidia.com/gpu=1"}
		}, "injected nvidia.com/gpu=mig-0, nvidia.com/gpu=1 (from annotation cdi.k8s.io/nvidia-device-plugin_mig-0)"},
		{"mount", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: MountDir + "/GPU-4c8d3e2a-1f0b-4b7e-9a51-6d2f0c1e8a77", Source: "/dev/null", Type: "bind", Options: []string{"bind", "ro"}})
		}, "injected nvidia.com/gpu=GPU-4c8d3e2a-1f0b-4b7e-9a51-6d2f0c1e8a77 (from mounts under " + MountDir + ")"},
		{"docker-gpus", func(s *specs.Spec) {
			// What dockerd's --gpus all with NVIDIA's driver does.
			s.Process.Env = append(s.Process.Env, EnvVar+"=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility")
			s.Hooks = &specs.Hooks{Prestart: []specs.Hook{
				{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"nvidia-container-runtime-hook", "prestart"}},
				{Path: "/usr/libexec/other-hook"},
			}}
		}, "dropped the legacy nvidia-container-runtime-hook"},
	}
	for _, tt := range tests {
		// Cold: through the CDI library, which fills the cache; warm: from
		// the cache. Both must write the same config.json.
		for _, warm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/warm=%v", tt.name, warm), func(t *testing.T) {
				testCreateInjects(t, tt.name, tt.edit, tt.log, warm)
			})
		}
	}
}

func testCreateInjects(t *testing.T, name string, edit func(*specs.Spec), wantLog string, warm bool) {
	f := newFixture(t, edit)
	args := []string{"--root", "/run/runc", "create", "--bundle", f.bundle, "--pid-file", "/x/pid", "ctr1"}
	orig, _ := os.ReadFile(f.config)
	if warm {
		if err := f.rt.Run(args); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(f.config, orig, 0o600)
		f.calls = nil
	}
	if err := f.rt.Run(args); err != nil {
		t.Fatal(err)
	}
	want := append([]string{f.runc}, args...)
	if len(f.calls) != 1 || !reflect.DeepEqual(f.calls[0], want) {
		t.Errorf("exec calls = %q, want one: %q", f.calls, want)
	}
	out, err := os.ReadFile(f.config)
	if err != nil {
		t.Fatal(err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, out, "", "\t"); err != nil {
		t.Fatalf("config.json written is not JSON: %v", err)
	}
	indented.WriteByte('\n')
	golden := filepath.Join("testdata", name+".golden.json")
	if *update && !warm {
		if err := os.WriteFile(golden, indented.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want2, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(indented.Bytes(), want2) {
		t.Errorf("config.json differs from %s (go test -update rewrites it):\n%s", golden, indented.Bytes())
	}
	if fi, err := os.Stat(f.config); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode = %v, %v; want 0600 kept", fi.Mode(), err)
	}
	logged, _ := os.ReadFile(f.log)
	if !strings.Contains(string(logged), "level=info") || !strings.Contains(string(logged), wantLog) {
		t.Errorf("log = %q, want an info entry with %q", logged, wantLog)
	}
	if entries, _ := os.ReadDir(f.rt.cfg.Runtime.CacheDir); !strings.Contains(name, "none") && len(entries) != 1 {
		t.Errorf("cache dir holds %d entries, want 1", len(entries))
	}
}

// A create that requests nothing leaves config.json byte for byte and
// writes no log.
func TestCreatePassesThrough(t *testing.T) {
	for name, edit := range map[string]func(*specs.Spec){
		"no request": nil,
		"void":       withEnv("void"),
		"empty":      withEnv(""),
		"other annotations": func(s *specs.Spec) {
			s.Annotations = map[string]string{"io.kubernetes.cri.sandbox-id": "abc"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, edit)
			before, _ := os.ReadFile(f.config)
			fi0, _ := os.Stat(f.config)
			args := []string{"create", "-b", f.bundle, "ctr1"}
			if err := f.rt.Run(args); err != nil {
				t.Fatal(err)
			}
			after, _ := os.ReadFile(f.config)
			fi1, _ := os.Stat(f.config)
			if !bytes.Equal(before, after) || !os.SameFile(fi0, fi1) || !fi0.ModTime().Equal(fi1.ModTime()) {
				t.Error("config.json was rewritten")
			}
			if len(f.calls) != 1 || !reflect.DeepEqual(f.calls[0], append([]string{f.runc}, args...)) {
				t.Errorf("exec calls = %q", f.calls)
			}
			if _, err := os.Stat(f.log); err == nil {
				t.Error("a pass-through create wrote the log")
			}
		})
	}
}

// Every command but create goes to the real runtime untouched, even with
// a bundle that asks for devices.
func TestOtherCommandsPassThrough(t *testing.T) {
	f := newFixture(t, withEnv("0"))
	before, _ := os.ReadFile(f.config)
	for _, args := range [][]string{
		{"--root", "/run/runc", "start", "ctr1"},
		{"run", "--bundle", f.bundle, "ctr1"},
		{"delete", "--force", "ctr1"},
		{"features"},
		{"--version"},
		{},
		// Help and version instead of a create, as runc reads them.
		{"create", "--bundle", f.bundle, "--help", "ctr1"},
		{"create", "-h"},
		{"--help", "create", "--bundle", f.bundle, "ctr1"},
		{"--version", "create", "--bundle", f.bundle, "ctr1"},
	} {
		f.calls = nil
		if err := f.rt.Run(args); err != nil {
			t.Fatal(err)
		}
		if want := append([]string{f.runc}, args...); len(f.calls) != 1 || !reflect.DeepEqual(f.calls[0], want) {
			t.Errorf("Run(%q): exec calls = %q, want %q", args, f.calls, want)
		}
	}
	if after, _ := os.ReadFile(f.config); !bytes.Equal(before, after) {
		t.Error("config.json changed")
	}
	if _, err := os.Stat(f.log); err == nil {
		t.Error("the pass-through path wrote the log")
	}
}

// Bad input fails create with one line naming the problem, leaves
// config.json alone and execs nothing.
func TestCreateBadInput(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fixture)
		args    func(f *fixture) []string
		wantErr string
	}{
		{name: "malformed config.json",
			setup: func(f *fixture) {
				os.WriteFile(f.config, []byte("{\n\"ociVersion\": \"1.0.2\",\n\"process\": {,}\n}\n"), 0o600)
			},
			wantErr: "config.json: not valid JSON at line 3 column 13: invalid character ','"},
		{name: "config.json of the wrong shape",
			setup:   func(f *fixture) { os.WriteFile(f.config, []byte(`{"process": []}`), 0o600) },
			wantErr: `config.json: not a valid OCI spec: "process" is an array, want an object`},
		// runc's encoding/json reads the last of two members, and takes
		// "Process" for "process": gpuctk would act on another document.
		{name: "member twice, differing in case",
			setup: func(f *fixture) {
				os.WriteFile(f.config, []byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]},"Process":{"env":[]}}`), 0o600)
			},
			wantErr: `config.json: keys "process" and "Process" in the top-level object differ only in letter case`},
		{name: "long s as s",
			setup: func(f *fixture) {
				os.WriteFile(f.config, []byte(`{"process":{"env":[]},"proce\u017fs":{"env":["NVIDIA_VISIBLE_DEVICES=0"]}}`), 0o600)
			},
			wantErr: `config.json: keys "process" and "proceſs" in the top-level object`},
		{name: "member twice in process",
			setup: func(f *fixture) {
				os.WriteFile(f.config, []byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"],"env":[]}}`), 0o600)
			},
			wantErr: `config.json: duplicate key "env" in process`},
		{name: "member twice in a hook",
			setup: func(f *fixture) {
				os.WriteFile(f.config, []byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]},"hooks":{"prestart":[{"path":"/a","Path":"/b"}]}}`), 0o600)
			},
			wantErr: `config.json: keys "path" and "Path" in hooks.prestart[0] differ only in letter case`},
		{name: "annotation twice",
			setup: func(f *fixture) {
				os.WriteFile(f.config, []byte(`{"annotations":{"cdi.k8s.io/a":"nvidia.com/gpu=0","cdi.k8s.io/a":"nvidia.com/gpu=1"}}`), 0o600)
			},
			wantErr: `config.json: duplicate key "cdi.k8s.io/a" in annotations`},
		// Keys and numbers the image or the user sets (docker's
		// --annotation) are quoted clipped: one line of at most a few KB.
		{name: "long key twice",
			setup: func(f *fixture) {
				k := strings.Repeat("k", 1<<20)
				os.WriteFile(f.config, []byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]},"annotations":{"`+k+`":"1","`+k+`":"2"}}`), 0o600)
			},
			wantErr: `config.json: duplicate key "kkkk`},
		{name: "key twice below a long key",
			setup: func(f *fixture) {
				k := strings.Repeat("k", 1<<20)
				os.WriteFile(f.config, []byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]},"hooks":{"`+k+`":{"x":1,"x":2}}}`), 0o600)
			},
			wantErr: `config.json: duplicate key "x" in hooks.kkkk`},
		{name: "long number",
			setup: func(f *fixture) {
				os.WriteFile(f.config, []byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"],"user":{"uid":1`+strings.Repeat("0", 1<<20)+`}}}`), 0o600)
			},
			wantErr: `config.json: not a valid OCI spec: "process.user.uid" is a number 1000`},
		{name: "missing bundle",
			args:    func(f *fixture) []string { return []string{"create", "--bundle", f.bundle + "-gone", "ctr1"} },
			wantErr: "create ctr1: bundle " + "BUNDLE-gone has no config.json: pass the bundle with --bundle"},
		{name: "unknown device",
			setup:   func(f *fixture) { addEnv(f, "mig-0,7") },
			wantErr: "create ctr1: unknown device nvidia.com/gpu=7 (requested by NVIDIA_VISIBLE_DEVICES): the CDI specs in CDIDIR, NOSUCHDIR provide nvidia.com/gpu=0, nvidia.com/gpu=0::1, nvidia.com/gpu=1, nvidia.com/gpu=GPU-4c8d3e2a-1f0b-4b7e-9a51-6d2f0c1e8a77, nvidia.com/gpu=all, nvidia.com/gpu=mig-0"},
		{name: "unknown annotated devices",
			setup: func(f *fixture) {
				addAnnotation(f, "cdi.k8s.io/p", "nvidia.com/gpu=2,example.com/nic=0")
			},
			wantErr: "unknown devices nvidia.com/gpu=2, example.com/nic=0 (requested by annotation cdi.k8s.io/p)"},
		{name: "no spec dir",
			setup: func(f *fixture) {
				addEnv(f, "0")
				f.rt.cfg.CDI.SpecDirs = f.rt.cfg.CDI.SpecDirs[1:]
			},
			wantErr: "the CDI specs in NOSUCHDIR provide no device at all: run `gpuctk cdi generate`"},
		{name: "no runtime",
			setup: func(f *fixture) {
				addEnv(f, "0")
				f.rt.cfg.Runtime.Runtimes = []string{"gpuctk-test-no-runc", "gpuctk-test-no-crun"}
			},
			wantErr: "create ctr1: no low-level runtime found: none of gpuctk-test-no-runc, gpuctk-test-no-crun is on PATH or in /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin (install runc or set [runtime] runtimes in /etc/gpuctk/config.toml)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			if tt.setup != nil {
				tt.setup(f)
			}
			before, _ := os.ReadFile(f.config)
			args := []string{"--log", f.bundle + "/log.json", "--log-format", "json", "create", "--bundle", f.bundle, "ctr1"}
			if tt.args != nil {
				args = tt.args(f)
			}
			err := f.rt.Run(args)
			want := strings.NewReplacer("BUNDLE", f.bundle, "CDIDIR", f.rt.cfg.CDI.SpecDirs[0], "NOSUCHDIR", filepath.Join(filepath.Dir(f.bundle), "no-such-dir")).Replace(tt.wantErr)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error = %v\nwant one containing %q", err, want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has more than one line: %q", err)
			}
			if len(err.Error()) > maxMessage {
				t.Errorf("error is %d bytes, want at most %d", len(err.Error()), maxMessage)
			}
			if len(f.calls) != 0 {
				t.Errorf("exec ran: %q", f.calls)
			}
			if after, _ := os.ReadFile(f.config); !bytes.Equal(before, after) {
				t.Error("config.json changed")
			}
			if entries, _ := os.ReadDir(f.bundle); len(entries) > 2 {
				t.Errorf("bundle holds leftovers: %v", entries)
			}
			logged, _ := os.ReadFile(f.log)
			if !strings.Contains(string(logged), "level=error msg=") {
				t.Errorf("own log = %q, want an error entry", logged)
			}
			if tt.args == nil {
				var entry struct{ Level, Msg string }
				line, _ := os.ReadFile(f.bundle + "/log.json")
				if jerr := json.Unmarshal(line, &entry); jerr != nil || entry.Level != "error" || entry.Msg != err.Error() {
					t.Errorf("runc --log = %q, want one json entry at level \"error\"", line)
				}
			}
		})
	}
}

// TestCreateConfigNotRegular: a config.json that is not a regular file
// (after links, which runc follows) fails create at once in one line,
// and is left as it is: a FIFO would hang the create, a device such as
// /dev/zero would be read until memory runs out.
func TestCreateConfigNotRegular(t *testing.T) {
	tests := []struct {
		name    string
		plant   func(path string) error
		wantErr string
	}{
		{"FIFO", func(path string) error { return syscall.Mkfifo(path, 0o600) },
			"config.json is a FIFO, not a regular file"},
		{"link to a FIFO", func(path string) error {
			fifo := filepath.Join(filepath.Dir(path), "fifo")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				return err
			}
			return os.Symlink(fifo, path)
		}, "config.json is a FIFO, not a regular file"},
		{"link to a device", func(path string) error { return os.Symlink("/dev/null", path) },
			"config.json is a character device, not a regular file"},
		{"folder", func(path string) error { return os.Mkdir(path, 0o700) },
			"config.json is a folder, not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			os.Remove(f.config)
			if err := tt.plant(f.config); err != nil {
				t.Fatal(err)
			}
			before, _ := os.Lstat(f.config)
			err := runWithin(t, f)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error = %v, want one line containing %q", err, tt.wantErr)
			}
			if len(f.calls) != 0 {
				t.Errorf("exec ran: %q", f.calls)
			}
			if after, err := os.Lstat(f.config); err != nil || after.Mode() != before.Mode() {
				t.Errorf("config.json is now %v, %v; want it left as %v", after.Mode(), err, before.Mode())
			}
		})
	}
}

func addEnv(f *fixture, v string) {
	editConfig(f, withEnv(v))
}

func addAnnotation(f *fixture, k, v string) {
	editConfig(f, func(s *specs.Spec) { s.Annotations = map[string]string{k: v} })
}

func editConfig(f *fixture, edit func(*specs.Spec)) {
	data, _ := os.ReadFile(f.config)
	var s specs.Spec
	json.Unmarshal(data, &s)
	edit(&s)
	data, _ = json.Marshal(&s)
	os.WriteFile(f.config, data, 0o600)
}

// The cache answers only for the specs it was filled from, ignores what it
// cannot read, and says the same about unknown devices as the library.
func TestCache(t *testing.T) {
	run := func(f *fixture, edit func(*specs.Spec)) error {
		if edit != nil {
			editConfig(f, edit)
		}
		f.calls = nil
		return f.rt.Run([]string{"create", "--bundle", f.bundle, "ctr1"})
	}
	entry := func(t *testing.T, f *fixture) string {
		entries, err := os.ReadDir(f.rt.cfg.Runtime.CacheDir)
		if err != nil || len(entries) != 1 {
			t.Fatalf("cache entries = %v, %v; want one", entries, err)
		}
		return filepath.Join(f.rt.cfg.Runtime.CacheDir, entries[0].Name())
	}

	t.Run("a changed spec makes a new entry", func(t *testing.T) {
		f := newFixture(t, withEnv("0"))
		specDir := t.TempDir()
		spec, _ := os.ReadFile("testdata/cdi/nvidia.yaml")
		os.WriteFile(filepath.Join(specDir, "nvidia.yaml"), spec, 0o644)
		f.rt.cfg.CDI.SpecDirs = []string{specDir}
		// Just written: resolved, but not cached, since a rewrite within
		// the same timestamp tick would go unseen.
		if err := run(f, nil); err != nil {
			t.Fatal(err)
		}
		if entries, _ := os.ReadDir(f.rt.cfg.Runtime.CacheDir); len(entries) != 0 {
			t.Fatalf("a spec changed just now was cached: %v", entries)
		}
		time.Sleep(racyWindow + 10*time.Millisecond)
		if err := run(f, withEnv("0")); err != nil {
			t.Fatal(err)
		}
		first := entry(t, f)
		os.WriteFile(filepath.Join(specDir, "nvidia.yaml"), bytes.ReplaceAll(spec, []byte("name: mig-0"), []byte("name: mig-9")), 0o644)
		time.Sleep(racyWindow + 10*time.Millisecond)
		err := run(f, withEnv("mig-9"))
		if err != nil {
			t.Fatal(err)
		}
		if second := entry(t, f); second == first {
			t.Error("the entry of the old spec answered")
		}
		err = run(f, withEnv("mig-0"))
		if err == nil || !strings.Contains(err.Error(), "unknown device nvidia.com/gpu=mig-0") {
			t.Errorf("mig-0 after it left the spec: %v", err)
		}
	})

	t.Run("an unreadable entry is ignored", func(t *testing.T) {
		f := newFixture(t, withEnv("mig-0"))
		orig, _ := os.ReadFile(f.config)
		if err := run(f, nil); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(f.config)
		e := entry(t, f)
		data, _ := os.ReadFile(e)
		os.WriteFile(e, bytes.Replace(data, []byte("device\tnvidia.com/gpu=mig-0\t0\t{"), []byte("device\tnvidia.com/gpu=mig-0\t0\t{garbage"), 1), 0o600)
		os.WriteFile(f.config, orig, 0o600)
		if err := run(f, nil); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(f.config); !bytes.Equal(got, want) {
			t.Error("config.json differs after a corrupt cache entry")
		}
		// An entry cut short lacks devices: they are not unknown.
		os.WriteFile(e, data[:len(data)/2], 0o600)
		os.WriteFile(f.config, orig, 0o600)
		if err := run(f, nil); err != nil {
			t.Fatalf("create with an entry cut short: %v", err)
		}
	})

	t.Run("unknown device from the cache", func(t *testing.T) {
		cold := newFixture(t, withEnv("9"))
		errCold := run(cold, nil)
		errWarm := run(cold, nil)
		if errCold == nil || errWarm == nil || errCold.Error() != errWarm.Error() {
			t.Errorf("cold: %v\nwarm: %v\nwant the same error", errCold, errWarm)
		}
	})

	t.Run("a cache dir others can write is made private", func(t *testing.T) {
		f := newFixture(t, withEnv("0"))
		os.Mkdir(f.rt.cfg.Runtime.CacheDir, 0o777)
		os.Chmod(f.rt.cfg.Runtime.CacheDir, 0o777)
		if err := run(f, nil); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(f.rt.cfg.Runtime.CacheDir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("cache dir after create: %v, %v; want mode 0700", fi.Mode(), err)
		}
	})
}

// Members CDI does not edit stay as they were, even ones this runtime-spec
// does not know.
func TestCreateKeepsOtherMembers(t *testing.T) {
	f := newFixture(t, withEnv("0"))
	var doc map[string]json.RawMessage
	data, _ := os.ReadFile(f.config)
	json.Unmarshal(data, &doc)
	// Written by hand, so that the spacing is not encoding/json's.
	data = append([]byte(`{"org.example.future": {"b": 2,  "a": [1, 2]},`), data[1:]...)
	os.WriteFile(f.config, data, 0o600)
	json.Unmarshal(data, &doc)
	if err := f.rt.Run([]string{"create", "--bundle", f.bundle, "ctr1"}); err != nil {
		t.Fatal(err)
	}
	var after map[string]json.RawMessage
	data, _ = os.ReadFile(f.config)
	if err := json.Unmarshal(data, &after); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"org.example.future", "root", "hostname", "ociVersion"} {
		if !bytes.Equal(after[key], doc[key]) {
			t.Errorf("%s = %s, want %s as it was", key, after[key], doc[key])
		}
	}
}

// A create rewrites only the members CDI edits change: every other member,
// known or newer than the runtime-spec we build with, keeps its bytes and
// its place, at the top level and inside process and linux.
func TestCreateKeepsUntouchedMembers(t *testing.T) {
	f := newFixture(t, nil)
	const (
		caps    = `{"bounding": ["CAP_KILL"],  "effective": ["CAP_KILL"]}`
		future  = `{"x": [1, 2.50, "\u00e9"], "y": null}`
		memory  = `{"limit": 1048576, "swap":  2097152}`
		rootfs  = `{"path": "rootfs",   "readonly": true}`
		userRaw = `{"uid": 1000, "gid": 1000, "umask": 18, "futureUser": true}`
	)
	config := `{"ociVersion": "1.2.0", "futureTop": ` + future + `,
 "process": {"futureProcess": ` + future + `, "user": ` + userRaw + `, "args": ["sh"], "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=mig-0"], "capabilities": ` + caps + `},
 "root": ` + rootfs + `,
 "linux": {"futureLinux": ` + future + `, "resources": {"memory": ` + memory + `, "futureResources": ` + future + `}, "namespaces": [{"type": "mount"}]}}`
	if err := os.WriteFile(f.config, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.Run([]string{"create", "--bundle", f.bundle, "c1"}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(f.config)
	for _, want := range []string{
		`"futureTop":` + future, `"root":` + rootfs,
		`"futureProcess":` + future, `"args":["sh"]`, `"capabilities":` + caps,
		`"futureLinux":` + future, `"memory":` + memory, `"futureResources":` + future,
		`"namespaces":[{"type": "mount"}]`,
	} {
		if !strings.Contains(string(after), want) {
			t.Errorf("config.json lost %s:\n%s", want, after)
		}
	}
	var got struct {
		Process struct {
			Env  []string
			User map[string]any
		}
		Linux struct {
			Devices   []specs.LinuxDevice
			Resources struct{ Devices []specs.LinuxDeviceCgroup }
		}
	}
	if err := json.Unmarshal(after, &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Process.Env, EnvVar+"=void") || slices.Contains(got.Process.Env, EnvVar+"=mig-0") {
		t.Errorf("env = %q, want %s=void in place of the request", got.Process.Env, EnvVar)
	}
	if got.Process.User["futureUser"] != true || got.Process.User["umask"] != 18.0 {
		t.Errorf("user = %v, want its members kept", got.Process.User)
	}
	if len(got.Linux.Devices) == 0 || len(got.Linux.Resources.Devices) == 0 {
		t.Errorf("linux = %+v, want the device nodes and their cgroup rules", got.Linux)
	}
	// The nodes belong to the process's user, as the CDI library does it.
	for _, d := range got.Linux.Devices {
		if d.UID == nil || *d.UID != 1000 || d.GID == nil || *d.GID != 1000 {
			t.Errorf("device %s: uid/gid not the process user's", d.Path)
		}
	}
	// Members keep their order: ociVersion, futureTop, process, root, linux.
	order := regexp.MustCompile(`^\{"ociVersion":.*"futureTop":.*"process":\{"futureProcess":.*"user":.*"args":.*"env":.*"capabilities":.*\},"root":.*"linux":\{"futureLinux":`)
	if !order.Match(after) {
		t.Errorf("members moved:\n%s", after)
	}
}

// TestCreateCapabilitiesNeedADevice: NVIDIA_DRIVER_CAPABILITIES adds
// capability devices only beside a device of the kind that the container's
// environment or mounts asked for. A capability device brings the spec's
// common edits (the driver's control nodes, its files, the hook), so a
// container given another kind's device by annotation, with the variable
// set by its image, would get the driver's nodes it never asked for; and
// where a device plugin's annotations name the devices, the node decides
// the capabilities (they are among the annotated devices), not the pod.
func TestCreateCapabilitiesNeedADevice(t *testing.T) {
	specDir := t.TempDir()
	gpus, err := os.ReadFile("../cdi/testdata/dgx-h100-mig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(specDir, "nvidia.yaml"), gpus, 0o644)
	os.WriteFile(filepath.Join(specDir, "nic.yaml"), []byte(`cdiVersion: "0.5.0"
kind: "example.com/nic"
devices:
  - name: "nic0"
    containerEdits:
      env: ["NIC=0"]
`), 0o644)
	caps := func(v string) string { return CapabilitiesVar + "=" + v }
	for _, tc := range []struct {
		name    string
		env     []string
		annot   map[string]string
		display bool // the display capability's files
		driver  bool // the driver's control node
	}{
		{"a GPU from the environment, display", []string{EnvVar + "=0", caps("display")}, nil, true, true},
		{"another kind's device by annotation, display", []string{caps("display")}, map[string]string{"cdi.k8s.io/nic": "example.com/nic=nic0"}, false, false},
		{"another kind's device by annotation, all, and the variable naming a GPU ignored", []string{EnvVar + "=0", caps("all")}, map[string]string{"cdi.k8s.io/nic": "example.com/nic=nic0"}, false, false},
		{"a GPU by annotation, the pod's display", []string{caps("display")}, map[string]string{"cdi.k8s.io/plugin": "nvidia.com/gpu=0"}, false, true},
		{"a GPU and display by annotation", nil, map[string]string{"cdi.k8s.io/plugin": "nvidia.com/gpu=0,nvidia.com/gpu=capability-display"}, true, true},
		{"no device, display", []string{EnvVar + "=none", caps("display")}, nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(s *specs.Spec) {
				s.Process.Env = append(s.Process.Env, tc.env...)
				s.Annotations = tc.annot
			})
			f.rt.cfg.CDI.SpecDirs = []string{specDir}
			if err := f.rt.Run([]string{"create", "--bundle", f.bundle, "ctr1"}); err != nil {
				t.Fatal(err)
			}
			out, _ := os.ReadFile(f.config)
			if got := strings.Contains(string(out), "nvidia_drv.so"); got != tc.display {
				t.Errorf("display files in config.json: %v, want %v", got, tc.display)
			}
			if got := strings.Contains(string(out), "/dev/nvidiactl"); got != tc.driver {
				t.Errorf("/dev/nvidiactl in config.json: %v, want %v", got, tc.driver)
			}
		})
	}
}
