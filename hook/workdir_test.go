package hook

import (
	"bytes"
	"encoding/json"
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

// TestBundleFromWorkDir finds the container from the working directory
// where runc runs the hook, and reads the OCI state on stdin everywhere
// else: another runtime, a root kept apart from its bundle (podman,
// CRI-O), a config.json naming another root.
func TestBundleFromWorkDir(t *testing.T) {
	// The state on stdin names a bundle of its own, so that which of the
	// two was used shows in the root found.
	stateBundle, stateRoot := bundle(t)
	tests := []struct {
		name string
		// layout makes the folders under dir and returns the working
		// directory and the root expected from it.
		layout func(t *testing.T, dir string) (wd, root string)
		runc   bool
		// fromState: the state was read and the root is its bundle's.
		fromState bool
	}{
		{name: "containerd layout", runc: true, layout: func(t *testing.T, dir string) (string, string) {
			return bundleIn(t, dir, "rootfs", "rootfs")
		}},
		{name: "root.path absolute", runc: true, layout: func(t *testing.T, dir string) (string, string) {
			return bundleIn(t, dir, "rootfs", filepath.Join(dir, "rootfs"))
		}},
		{name: "not runc", runc: false, fromState: true, layout: func(t *testing.T, dir string) (string, string) {
			return bundleIn(t, dir, "rootfs", "rootfs")
		}},
		{name: "root apart from the bundle", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string) {
			wd := filepath.Join(dir, "overlay", "merged")
			os.MkdirAll(wd, 0o755)
			return wd, ""
		}},
		{name: "config.json naming another root", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string) {
			wd, _ := bundleIn(t, dir, "rootfs", "other")
			os.Mkdir(filepath.Join(dir, "other"), 0o755)
			return wd, ""
		}},
		{name: "config.json naming no root", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string) {
			wd, _ := bundleIn(t, dir, "rootfs", "")
			return wd, ""
		}},
		{name: "config.json a folder", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string) {
			os.MkdirAll(filepath.Join(dir, "config.json"), 0o755)
			os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755)
			return filepath.Join(dir, "rootfs"), ""
		}},
		{name: "working directory /", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string) {
			return "/", ""
		}},
		{name: "working directory relative", runc: true, fromState: true, layout: func(t *testing.T, dir string) (string, string) {
			bundleIn(t, dir, "rootfs", "rootfs")
			return "rootfs", ""
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wd, want := tc.layout(t, t.TempDir())
			st, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": stateBundle})
			stdin := &readRecorder{r: strings.NewReader(string(st))}
			var stderr bytes.Buffer
			e := &Env{Stdin: stdin, Stderr: &stderr, Debug: true, workDir: func() string { return wd }, runcInit: func() bool { return tc.runc }}
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
// rootPath (none when empty), with the folder name in it, and returns that
// folder.
func bundleIn(t *testing.T, dir, name, rootPath string) (string, string) {
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
	return folder, folder
}
