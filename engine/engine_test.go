package engine

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const runtimePath = "/usr/bin/gpuctk-runtime"

// golden compares a file written under dir with testdata/<golden>, the
// temporary dir written as etc.
func golden(t *testing.T, got []byte, dir, etc, name string) {
	t.Helper()
	got = bytes.ReplaceAll(got, []byte(dir), []byte(etc))
	if *update {
		if err := os.WriteFile(name, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("differs from %s (go test -update rewrites it); got:\n%s", name, got)
	}
}

// setup copies testdata/<engine>/<name>/<file> into a temp dir standing for
// etc, and returns the dir and the input (nil when the case has none).
func setup(t *testing.T, engine, name, file, etc string) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	in, err := os.ReadFile(filepath.Join("testdata", engine, name, file))
	if errors.Is(err, fs.ErrNotExist) {
		return dir, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	in = append([]byte{}, bytes.ReplaceAll(in, []byte(etc), []byte(dir))...) // an empty file is not nil
	if err := os.WriteFile(filepath.Join(dir, file), in, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, in
}

func readOrNil(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func plan(t *testing.T, engine string, o Options, uninstall bool) []Change {
	t.Helper()
	changes, _, err := Plan(engine, o, uninstall)
	if err != nil {
		t.Fatal(err)
	}
	return changes
}

func apply(t *testing.T, engine string, o Options, uninstall bool) {
	t.Helper()
	if err := Apply(plan(t, engine, o, uninstall)); err != nil {
		t.Fatal(err)
	}
	if again := plan(t, engine, o, uninstall); len(again) != 0 {
		t.Errorf("not idempotent: a second run would change %v", paths(again))
	}
}

func paths(changes []Change) []string {
	var p []string
	for _, c := range changes {
		p = append(p, c.Path)
	}
	return p
}

func TestContainerd(t *testing.T) {
	const etc = "/etc/containerd"
	tests := []struct {
		name         string
		setAsDefault bool
		mainChanges  bool
		dropIn       bool // version 3: a drop-in; else a block in the main config
		cdi          bool // --cdi: containerd's own CDI support on
	}{
		{"v2-1.7-default", false, true, false, false},
		{"v2-1.7-default-set", true, true, false, false},
		{"v2-imports", true, true, false, false},
		{"v2-default-line", true, true, false, false},
		{"v3", true, true, true, false},
		{"v4-2.4-default", false, false, true, false},
		{"v1", false, true, false, false},
		{"v2-no-final-newline", true, true, false, false},
		{"missing", false, true, false, false},
		{"empty", false, true, false, false},
		// 1.7's `containerd config default`: its enable_cdi = false and
		// cdi_spec_dirs lines replaced in place.
		{"v2-1.7-cdi", true, true, false, true},
		{"v1-cdi", false, true, false, true},
		// No config: the CRI table in the block.
		{"missing-cdi", false, true, false, true},
		// Tables without the keys: set under their headers.
		{"v2-cdi-header", true, true, false, true},
		// 2.x: CDI always on, cdi_spec_dirs in the drop-in.
		{"v3-cdi", false, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, in := setup(t, "containerd", tt.name, "config.toml", etc)
			o := Options{Path: runtimePath, SetAsDefault: tt.setAsDefault,
				Config: filepath.Join(dir, "config.toml"), DropIn: filepath.Join(dir, "conf.d", "99-gpuctk.toml")}
			if tt.cdi {
				o.CDISpecDirs = DefaultCDISpecDirs
			}
			apply(t, "containerd", o, false)

			dropIn := readOrNil(t, o.DropIn)
			main := readOrNil(t, o.Config)
			if tt.dropIn {
				golden(t, dropIn, dir, etc, filepath.Join("testdata", "containerd", tt.name, "99-gpuctk.golden.toml"))
			} else if dropIn != nil {
				t.Errorf("a drop-in for a version 1 or 2 config, which containerd 1.7 would let replace the main config's CRI section:\n%s", dropIn)
			}
			golden(t, main, dir, etc, filepath.Join("testdata", "containerd", tt.name, "config.golden.toml"))
			if got := !bytes.Equal(main, in); got != tt.mainChanges {
				t.Errorf("main config changed: %v, want %v", got, tt.mainChanges)
			}
			var m map[string]any
			if err := toml.Unmarshal(main, &m); err != nil {
				t.Fatalf("main config is not TOML: %v", err)
			}
			if tt.dropIn && !imports(m, o.Config, o.DropIn) {
				t.Error("main config does not import the drop-in")
			}
			var d struct {
				Version int            `toml:"version"`
				Plugins map[string]any `toml:"plugins"`
			}
			if err := toml.Unmarshal(dropIn, &d); err != nil {
				t.Fatalf("drop-in is not TOML: %v", err)
			}
			if bak := readOrNil(t, o.Config+BackupSuffix); tt.mainChanges && in != nil && !bytes.Equal(bak, in) {
				t.Errorf("backup %s is not the old config", o.Config+BackupSuffix)
			}
			// Configured again otherwise, the backup stays the original.
			apply(t, "containerd", Options{Path: "/opt/gpuctk-runtime", SetAsDefault: !tt.setAsDefault, Config: o.Config, DropIn: o.DropIn}, false)
			apply(t, "containerd", o, false)
			if bak := readOrNil(t, o.Config+BackupSuffix); tt.mainChanges && in != nil && !bytes.Equal(bak, in) {
				t.Errorf("a second configure overwrote the backup %s", o.Config+BackupSuffix)
			}

			apply(t, "containerd", o, true)
			if readOrNil(t, o.DropIn) != nil {
				t.Error("uninstall left the drop-in")
			}
			if got := readOrNil(t, o.Config); !bytes.Equal(got, in) || (got == nil) != (in == nil) {
				t.Errorf("uninstall left the main config as:\n%s\n(removed: %v) want it as it was:\n%s", got, got == nil, in)
			}
		})
	}
}

func TestCrio(t *testing.T) {
	const etc = "/etc/crio"
	for _, tt := range []struct {
		name         string
		setAsDefault bool
		note         string // in the note: what the user must add
	}{
		{"default", true, "restart CRI-O"},
		// Drop-ins make crun the default and change its monitor: the
		// runtime copies crun as CRI-O reads it, not the main file's runc.
		{"drop-ins", false, "restart CRI-O"},
		{"missing", false, "add monitor_path and runtime_root to [crio.runtime.runtimes.nvidia]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, in := setup(t, "crio", tt.name, "crio.conf", etc)
			others, _ := filepath.Glob(filepath.Join("testdata", "crio", tt.name, "crio.conf.d", "*"))
			for _, f := range others {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				os.MkdirAll(filepath.Join(dir, "crio.conf.d"), 0o755)
				os.WriteFile(filepath.Join(dir, "crio.conf.d", filepath.Base(f)), data, 0o644)
			}
			o := Options{Path: runtimePath, SetAsDefault: tt.setAsDefault,
				Config: filepath.Join(dir, "crio.conf"), DropIn: filepath.Join(dir, "crio.conf.d", "99-gpuctk.conf")}
			if _, note, err := Plan("crio", o, false); err != nil || !strings.Contains(note, tt.note) {
				t.Errorf("note %q (%v), want it to say %q", note, err, tt.note)
			}
			apply(t, "crio", o, false)
			dropIn := readOrNil(t, o.DropIn)
			golden(t, dropIn, dir, etc, filepath.Join("testdata", "crio", tt.name, "99-gpuctk.golden.conf"))
			var m map[string]any
			if err := toml.Unmarshal(dropIn, &m); err != nil {
				t.Fatalf("drop-in is not TOML: %v", err)
			}
			if got := readOrNil(t, o.Config); !bytes.Equal(got, in) {
				t.Error("crio.conf changed")
			}
			apply(t, "crio", o, true)
			if readOrNil(t, o.DropIn) != nil {
				t.Error("uninstall left the drop-in")
			}
		})
	}
}

func TestDocker(t *testing.T) {
	const etc = "/etc/docker"
	for _, tt := range []struct {
		name         string
		setAsDefault bool
	}{{"existing", true}, {"missing", false}, {"had-nvidia", true}} {
		t.Run(tt.name, func(t *testing.T) {
			dir, in := setup(t, "docker", tt.name, "daemon.json", etc)
			o := Options{Path: runtimePath, SetAsDefault: tt.setAsDefault, Config: filepath.Join(dir, "daemon.json")}
			// A first run with another path: the backup stays the
			// original through the second.
			apply(t, "docker", Options{Path: "/opt/gpuctk-runtime", Config: o.Config}, false)
			apply(t, "docker", o, false)
			golden(t, readOrNil(t, o.Config), dir, etc, filepath.Join("testdata", "docker", tt.name, "daemon.golden.json"))
			if bak := readOrNil(t, o.Config+BackupSuffix); in != nil && !bytes.Equal(bak, in) {
				t.Error("no backup of the old daemon.json")
			}
			apply(t, "docker", o, true)
			golden(t, readOrNil(t, o.Config), dir, etc, filepath.Join("testdata", "docker", tt.name, "daemon.uninstalled.golden.json"))
			if bak := readOrNil(t, o.Config+BackupSuffix); in != nil && !bytes.Equal(bak, in) {
				t.Error("uninstall lost the backup of the old daemon.json")
			}
		})
	}
}

func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("version = 2\n[plugins\n"), 0o644)
	badJSON := filepath.Join(dir, "bad.json")
	os.WriteFile(badJSON, []byte(`{"runtimes": {"x": 1,}}`), 0o644)
	list := filepath.Join(dir, "list.json")
	os.WriteFile(list, []byte(`[1]`), 0o644)
	// dockerd would read the last of the two, not the one we edit.
	twice := filepath.Join(dir, "twice.json")
	os.WriteFile(twice, []byte(`{"runtimes": {"nvidia": {"path": "/a"}, "nvidia": {"path": "/b"}}}`), 0o644)
	cased := filepath.Join(dir, "cased.json")
	os.WriteFile(cased, []byte(`{"default-runtime": "runc", "Default-Runtime": "crun"}`), 0o644)
	odd := t.TempDir()
	fifo := filepath.Join(odd, "fifo.conf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(odd, "dangling.toml")
	if err := os.Symlink(filepath.Join(odd, "none.toml"), dangling); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		engine  string
		o       Options
		wantErr string
	}{
		{"cri-o", Options{Path: runtimePath}, `engine "cri-o" is not known: use containerd, crio, docker or podman`},
		{"containerd", Options{Path: "gpuctk-runtime"}, `runtime path "gpuctk-runtime" is not absolute`},
		{"containerd", Options{Path: runtimePath, Config: bad, DropIn: filepath.Join(dir, "d.toml")}, "containerd config " + bad + ": line 2 column"},
		{"crio", Options{Path: runtimePath, Config: bad, DropIn: filepath.Join(dir, "d.conf")}, "CRI-O config " + bad + ": line 2 column"},
		{"docker", Options{Path: runtimePath, Config: badJSON}, "docker config " + badJSON + ": not valid JSON at byte"},
		{"docker", Options{Path: runtimePath, Config: list}, "docker config " + list + ": not a JSON object"},
		{"docker", Options{Path: runtimePath, Config: twice}, "docker config " + twice + `: duplicate key "nvidia" in runtimes`},
		{"docker", Options{Path: runtimePath, Config: cased}, "docker config " + cased + `: keys "default-runtime" and "Default-Runtime" in the top-level object differ only in letter case`},
		// Not a file: the atomic write would rename over a device, the
		// read of a FIFO would hang.
		{"containerd", Options{Path: runtimePath, Config: "/dev/null"}, "/dev/null is a character device, not a config file: name the runtime's config file"},
		{"docker", Options{Path: runtimePath, Config: "/dev/zero"}, "/dev/zero is a character device, not a config file"},
		{"crio", Options{Path: runtimePath, Config: filepath.Join(odd, "crio.conf"), DropIn: fifo}, fifo + " is a FIFO, not a config file"},
		{"containerd", Options{Path: runtimePath, Config: dir}, dir + " is a folder, not a config file"},
		{"containerd", Options{Path: runtimePath, Config: dangling}, dangling + " is a symbolic link that leads nowhere"},
	}
	for _, tt := range tests {
		_, _, err := Plan(tt.engine, tt.o, false)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Plan(%s) error = %v, want one line containing %q", tt.engine, err, tt.wantErr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 5 {
		t.Errorf("bad input left files: %v", entries)
	}
}

// A config linked into place is edited where the link leads; the link
// stays.
func TestPlanFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "managed", "config.toml")
	os.MkdirAll(filepath.Dir(real), 0o755)
	if err := os.WriteFile(real, []byte("version = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "config.toml")
	if err := os.Symlink("managed/config.toml", link); err != nil {
		t.Fatal(err)
	}
	changes, _, err := Plan("containerd", Options{Path: runtimePath, Config: link, DropIn: filepath.Join(dir, "conf.d", "gpuctk.toml")}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(changes); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(link); err != nil || target != "managed/config.toml" {
		t.Errorf("link = %q, %v; want it kept", target, err)
	}
	if data, _ := os.ReadFile(real); !strings.Contains(string(data), runtimePath) {
		t.Errorf("linked config not edited:\n%s", data)
	}
	if bak, err := os.ReadFile(real + BackupSuffix); err != nil || string(bak) != "version = 2\n" {
		t.Errorf("backup beside the file = %q, %v", bak, err)
	}
}

func TestPodmanNeedsNothing(t *testing.T) {
	changes, note, err := Plan("podman", Options{Path: runtimePath}, false)
	if err != nil || len(changes) != 0 || !strings.Contains(note, "podman needs no configuration") || !strings.Contains(note, "--runtime "+runtimePath) {
		t.Errorf("Plan(podman) = %v, %q, %v", changes, note, err)
	}
}

// containerd 1.7 puts an imported file's CRI section in place of the main
// config's: a block in the main config would be lost, and configure must
// say so rather than report the runtime added.
func TestContainerdImportedCRISection(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755)
	main := filepath.Join(dir, "config.toml")
	mirrors := filepath.Join(dir, "conf.d", "10-mirrors.toml")
	os.WriteFile(main, []byte("version = 2\nimports = [\"conf.d/*.toml\"]\n"), 0o644)
	os.WriteFile(mirrors, []byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n"), 0o644)
	o := Options{Path: runtimePath, Config: main, DropIn: filepath.Join(dir, "conf.d", "99-gpuctk.toml")}
	_, _, err := Plan("containerd", o, false)
	if err == nil || !strings.Contains(err.Error(), mirrors) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Plan = %v, want one line naming %s, whose CRI section containerd 1.7 keeps in place of the block", err, mirrors)
	}
	// A drop-in without a CRI section is no obstacle.
	os.WriteFile(mirrors, []byte("version = 2\n[plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"/opt/containerd\"\n"), 0o644)
	apply(t, "containerd", o, false)
}

// --set-as-default where the config writes default_runtime_name as a
// dotted key: the line set in its place must set the same key.
func TestContainerdDefaultDottedKey(t *testing.T) {
	for _, in := range []string{
		"version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.9\"\n  containerd.default_runtime_name = \"runc\"\n",
		"version = 2\nplugins.\"io.containerd.grpc.v1.cri\".containerd.default_runtime_name = \"runc\"\n",
	} {
		dir := t.TempDir()
		o := Options{Path: runtimePath, SetAsDefault: true, Config: filepath.Join(dir, "config.toml"), DropIn: filepath.Join(dir, "conf.d", "99-gpuctk.toml")}
		os.WriteFile(o.Config, []byte(in), 0o644)
		apply(t, "containerd", o, false)
		out := readOrNil(t, o.Config)
		var m map[string]any
		if err := toml.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		if got := table(m, "plugins", "io.containerd.grpc.v1.cri", "containerd")["default_runtime_name"]; got != "nvidia" {
			t.Errorf("default_runtime_name = %v, want nvidia; config:\n%s", got, out)
		}
		apply(t, "containerd", o, true)
		if got := readOrNil(t, o.Config); string(got) != in {
			t.Errorf("uninstall left:\n%s\nwant:\n%s", got, in)
		}
	}
}

// A config of another user's keeps its owner and group: a rootless
// engine's daemon.json or config.toml stays readable and editable by it.
func TestApplyKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file another owner")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "daemon.json")
	os.WriteFile(cfg, []byte(`{"log-level": "warn"}`), 0o600)
	if err := os.Chown(cfg, 1234, 4321); err != nil {
		t.Fatal(err)
	}
	apply(t, "docker", Options{Path: runtimePath, Config: cfg}, false)
	fi, err := os.Stat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 1234 || st.Gid != 4321 || fi.Mode().Perm() != 0o600 {
		t.Errorf("daemon.json is %d:%d %v, want 1234:4321 -rw-------", st.Uid, st.Gid, fi.Mode().Perm())
	}
}

// TestContainerdImportLoop: imports that loop through a folder link (each
// level's glob matching three files again, 3^40 paths before the kernel's
// link limit) are one line naming the loop, at once; a glob matching the
// config itself, which containerd skips, is no loop.
func TestContainerdImportLoop(t *testing.T) {
	dir := t.TempDir()
	confd := filepath.Join(dir, "conf.d")
	os.MkdirAll(confd, 0o755)
	main := filepath.Join(dir, "config.toml")
	os.WriteFile(main, []byte("version = 2\nimports = [\"*.toml\", \"conf.d/*.toml\"]\n"), 0o644)
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(confd, n+".toml"), []byte("version = 2\nimports = [\"loop/*.toml\"]\n"), 0o644)
	}
	if err := os.Symlink(".", filepath.Join(confd, "loop")); err != nil {
		t.Fatal(err)
	}
	o := Options{Path: runtimePath, Config: main, DropIn: filepath.Join(confd, "99-gpuctk.toml")}
	start := time.Now()
	_, _, err := Plan("containerd", o, false)
	want := "containerd config " + filepath.Join(confd, "a.toml") + " imports " + filepath.Join(confd, "loop", "a.toml") + ", which is " + filepath.Join(confd, "a.toml") + " again: its imports loop (through a link?); remove the import"
	if err == nil || err.Error() != want {
		t.Errorf("Plan = %v\nwant %s", err, want)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %s", d)
	}
	// Without the loop, the same files are fine.
	os.Remove(filepath.Join(confd, "loop"))
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(confd, n+".toml"), []byte("version = 2\nimports = [\"b.toml\"]\n"), 0o644)
	}
	if _, _, err := Plan("containerd", o, false); err != nil {
		t.Errorf("Plan without the loop: %v", err)
	}
}
