package hook

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readRecorder is a reader that records whether it was read.
type readRecorder struct {
	r    *strings.Reader
	read bool
}

func (r *readRecorder) Read(p []byte) (int, error) {
	r.read = true
	return r.r.Read(p)
}

// TestBundleFromWorkDir finds the container from the working directories
// of the hook and of runc where runc runs the hook, and reads the OCI
// state on stdin everywhere else: another runtime, runc's folder out of
// reach, a config.json naming another root.
func TestBundleFromWorkDir(t *testing.T) {
	// The state on stdin names a bundle of its own, so that which of the
	// two was used shows in the root found.
	stateBundle, stateRoot := bundle(t)
	tests := []struct {
		name string
		// layout makes the folders under dir and returns the working
		// directory, runc's working directory and the root expected.
		layout func(t *testing.T, dir string) (wd, runcDir, root string)
		runc   bool
		// ready: the state is on stdin already.
		ready bool
		// fromState: the state was read and the root is its bundle's.
		fromState bool
	}{
		{name: "state on stdin already", runc: true, ready: true, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			wd := bundleIn(t, dir, "rootfs", "rootfs")
			return wd, dir, ""
		}},
		{name: "containerd layout", runc: true, layout: func(t *testing.T, dir string) (string, string, string) {
			wd := bundleIn(t, dir, "rootfs", "rootfs")
			return wd, "", wd
		}},
		{name: "root.path absolute", runc: true, layout: func(t *testing.T, dir string) (string, string, string) {
			wd := bundleIn(t, dir, "rootfs", filepath.Join(dir, "rootfs"))
			return wd, "", wd
		}},
		{name: "not runc", runc: false, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			wd := bundleIn(t, dir, "rootfs", "rootfs")
			return wd, dir, ""
		}},
		{name: "podman layout", runc: true, layout: func(t *testing.T, dir string) (string, string, string) {
			root, bundle := podmanLayout(t, dir, true)
			return root, bundle, root
		}},
		{name: "podman layout, runc's folder unreadable", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			root, _ := podmanLayout(t, dir, true)
			return root, "", ""
		}},
		{name: "podman layout, runc's folder naming another root", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			root, bundle := podmanLayout(t, dir, false)
			return root, bundle, ""
		}},
		{name: "podman layout, not runc", runc: false, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			root, bundle := podmanLayout(t, dir, true)
			return root, bundle, ""
		}},
		{name: "config.json naming another root", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			wd := bundleIn(t, dir, "rootfs", "other")
			os.Mkdir(filepath.Join(dir, "other"), 0o755)
			return wd, "", ""
		}},
		{name: "config.json naming no root", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			wd := bundleIn(t, dir, "rootfs", "")
			return wd, dir, ""
		}},
		{name: "config.json a folder", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			os.MkdirAll(filepath.Join(dir, "config.json"), 0o755)
			os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755)
			return filepath.Join(dir, "rootfs"), dir, ""
		}},
		{name: "working directory /", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			return "/", dir, ""
		}},
		{name: "working directory relative", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string, string) {
			bundleIn(t, dir, "rootfs", "rootfs")
			return "rootfs", dir, ""
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wd, runcDir, want := tc.layout(t, t.TempDir())
			st, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": stateBundle})
			stdin := &readRecorder{r: strings.NewReader(string(st))}
			var stderr bytes.Buffer
			e := &Env{Stdin: stdin, Stderr: &stderr, Debug: true, ready: func() bool { return tc.ready }, workDir: func() string { return wd },
				runc: func() (bool, string) { return tc.runc, runcDir }}
			c, err := e.Container()
			if err != nil {
				t.Fatalf("Container: %v\n%s", err, stderr.String())
			}
			if tc.fromState {
				want = stateRoot
			}
			if c.Root != want || stdin.read != tc.fromState {
				t.Errorf("root %s, state read %v; want %s, %v\n%s", c.Root, stdin.read, want, tc.fromState, stderr.String())
			}
		})
	}
}

// bundleIn writes a bundle in dir whose config.json's root.path is
// rootPath (none when empty), with the folder name in it (none when
// empty), and returns that folder.
func bundleIn(t *testing.T, dir, name, rootPath string) string {
	t.Helper()
	folder := filepath.Join(dir, name)
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"ociVersion": "1.0.2"}
	if rootPath != "" {
		cfg["root"] = map[string]any{"path": rootPath}
	}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return folder
}

// podmanLayout makes a root and a bundle apart in dir, as podman lays
// them out, the bundle's config.json naming that root, or when ownRoot
// is false a folder of its own, and returns the two.
func podmanLayout(t *testing.T, dir string, ownRoot bool) (root, bundle string) {
	t.Helper()
	root, bundle = filepath.Join(dir, "overlay", "merged"), filepath.Join(dir, "userdata")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if ownRoot {
		bundleIn(t, bundle, "", root)
	} else {
		bundleIn(t, bundle, "other", "other")
	}
	return root, bundle
}

// TestProcStat reads a process's name and parent from /proc/PID/stat
// lines, whatever its name holds.
func TestProcStat(t *testing.T) {
	for _, tc := range []struct {
		line, comm, ppid string
		ok               bool
	}{
		{line: "4242 (runc:[2:INIT]) S 4200 4242 4200 0 -1\n", comm: "runc:[2:INIT]", ppid: "4200", ok: true},
		{line: "7 (a) b (c) R 3 7 7\n", comm: "a) b (c", ppid: "3", ok: true},
		{line: "7 (x y) S 1\n", comm: "x y", ppid: "1", ok: true},
		{line: "7 (cut short"},
		{line: "7 (name) S\n"},
		{line: ""},
	} {
		path := filepath.Join(t.TempDir(), "stat")
		os.WriteFile(path, []byte(tc.line), 0o644)
		comm, ppid, ok := procStat(path)
		if comm != tc.comm || ppid != tc.ppid || ok != tc.ok {
			t.Errorf("%q: %q %q %v, want %q %q %v", tc.line, comm, ppid, ok, tc.comm, tc.ppid, tc.ok)
		}
	}
	if isInit, _ := runcParent(); isInit {
		t.Error("runcParent: go test's parent taken for runc's init")
	}
}

// TestStateReady tells a stdin the state can be read from at once (data,
// its end, a file) from one whose writer has not written yet.
func TestStateReady(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(file, []byte(`{"bundle":"/b"}`), 0o644)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pipe := func(t *testing.T, data string, closeWriter bool) *os.File {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		w.WriteString(data)
		if closeWriter {
			w.Close()
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		stdin io.Reader
		want  bool
	}{
		{"a file", f, true},
		{"a pipe with the state", pipe(t, `{"bundle":"/b"}`, false), true},
		{"a pipe closed empty", pipe(t, "", true), true},
		{"a pipe not written yet", pipe(t, "", false), false},
		{"not a file", strings.NewReader("{}"), true},
	} {
		if got := (&Env{Stdin: tc.stdin}).stateReady(); got != tc.want {
			t.Errorf("%s: ready %v, want %v", tc.name, got, tc.want)
		}
	}
}
