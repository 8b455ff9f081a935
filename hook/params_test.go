package hook

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

func TestNoModifyDeviceFiles(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		changed  bool
	}{
		{"ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n", "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\n", true},
		{"ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0\n", true},
		{"ModifyDeviceFiles: 0\n", "ModifyDeviceFiles: 0\n", false},
		{"DeviceFileUID: 0\n", "DeviceFileUID: 0\n", false},
		{"XModifyDeviceFiles: 1\nModifyDeviceFiles: 10\n", "XModifyDeviceFiles: 1\nModifyDeviceFiles: 10\n", false},
	} {
		got, changed := noModifyDeviceFiles([]byte(tc.in))
		if string(got) != tc.want || changed != tc.changed {
			t.Errorf("noModifyDeviceFiles(%q) = %q, %v; want %q, %v", tc.in, got, changed, tc.want, tc.changed)
		}
	}
}

const hostParams = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileMode: 438\n"

// runcContainer runs script in a busybox container with real runc, the
// hook as its createContainer hook with args, and returns the output.
// No driver here gives procfs a /proc/driver/nvidia/params: when plant is
// not empty, a createContainer hook before gpuctk-hook stands in for the
// driver, in the container's mount namespace: it mounts a tmpfs over the
// container's /proc/driver and runs plant (shell) in it.
func runcContainer(t *testing.T, plant string, hookArgs []string, script string) (string, error) {
	t.Helper()
	b := t.TempDir()
	root := filepath.Join(b, "rootfs")
	if err := fakehost.Rootfs(root, 0); err != nil {
		t.Fatal(err)
	}
	var hooks []map[string]any
	if plant != "" {
		hooks = append(hooks, map[string]any{"path": "/bin/sh", "args": []string{"sh", "-ec",
			"mount -t tmpfs -o size=64k tmpfs " + root + "/proc/driver; cd " + root + "/proc/driver; " + plant}})
	}
	// runc shows a hook's stderr only when it fails: keep it in a file.
	log := filepath.Join(b, "hook.log")
	hooks = append(hooks, map[string]any{"path": "/bin/sh", "args": append([]string{"sh", "-c", `exec "$0" "$@" 2>` + log,
		hookBin(t), "--debug", "setup"}, hookArgs...)})
	cfg := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"args": []string{"/bin/sh", "-c", script}, "cwd": "/", "env": []string{"PATH=/bin"},
			"user":    map[string]any{"uid": 0, "gid": 0},
			"rlimits": []map[string]any{{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}},
		},
		"root": map[string]any{"path": "rootfs"},
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "mode=755", "size=64k"}},
		},
		"hooks": map[string]any{"createContainer": hooks},
		"linux": map[string]any{"namespaces": []map[string]any{{"type": "mount"}, {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}}},
	}
	data, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(b, "config.json"), data, 0o644)
	out, err := exec.Command("runc", "--root", t.TempDir(), "run", "--bundle", b, "gpuctk-params-"+filepath.Base(filepath.Dir(b))).CombinedOutput()
	hookLog, _ := os.ReadFile(log)
	out = append(out, hookLog...)
	if left, _ := filepath.Glob(filepath.Join(b, ".gpuctk-params-*")); len(left) > 0 {
		t.Errorf("the hook left %v in the bundle", left)
	}
	return string(out), err
}

// testMounts returns the host's mounts of this test's files and of any
// params file (other tests on the machine mount elsewhere meanwhile).
func testMounts(t *testing.T) string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "/TestProtectDeviceNodes") || strings.Contains(l, "params") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestProtectDeviceNodes runs real containers with runc: the container
// reads ModifyDeviceFiles: 0 in /proc/driver/nvidia/params and cannot
// write it, the host's file is unchanged, and nothing stays mounted on
// the host.
func TestProtectDeviceNodes(t *testing.T) {
	fakehost.RequireRoot(t, "runc runs containers as root")
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatal("runc is needed (tests/install-deps.sh installs it)")
	}
	host := filepath.Join(t.TempDir(), "params")
	os.WriteFile(host, []byte(hostParams), 0o444)
	const driver = "mkdir nvidia; echo 'ModifyDeviceFiles: 1' > nvidia/params"
	const read = "cat /proc/driver/nvidia/params; echo 'ModifyDeviceFiles: 1' > /proc/driver/nvidia/params && echo WRITTEN; true"
	for _, tc := range []struct {
		name    string
		plant   string
		args    []string
		want    []string // in the output
		wantErr bool
	}{
		{"covered", driver, []string{"--nvidia-params", host},
			[]string{strings.Replace(hostParams, "ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0", 1), "Read-only file system"}, false},
		{"not asked for", driver, nil, []string{"WRITTEN"}, false},
		{"no driver on the host", driver, []string{"--nvidia-params", host + ".absent"},
			[]string{"no " + host + ".absent on the host", "WRITTEN"}, false},
		{"no params in the container's procfs", "", []string{"--nvidia-params", host},
			[]string{"the container has no /proc/driver/nvidia/params"}, false},
		// What the hook resolves inside the root: a link where the params
		// file is, or on the way to it, must not make it mount over a file
		// elsewhere, nor may anything but a file.
		{"params a link to /etc/passwd", "mkdir nvidia; ln -s /etc/passwd nvidia/params", []string{"--nvidia-params", host},
			[]string{"not a regular file"}, true},
		{"/proc/driver/nvidia a link", "ln -s /etc nvidia", []string{"--nvidia-params", host},
			[]string{"symbolic links"}, true},
		{"params a FIFO", "mkdir nvidia; mkfifo nvidia/params", []string{"--nvidia-params", host},
			[]string{"not a regular file"}, true},
		{"params a folder", "mkdir -p nvidia/params", []string{"--nvidia-params", host},
			[]string{"not a regular file"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testMounts(t)
			out, err := runcContainer(t, tc.plant, tc.args, read)
			if (err != nil) != tc.wantErr {
				t.Fatalf("runc: %v, want error %v\n%s", err, tc.wantErr, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if data, _ := os.ReadFile(host); string(data) != hostParams {
				t.Errorf("the host's params changed: %q", data)
			}
			if after := testMounts(t); after != before {
				t.Errorf("the host's mounts changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestProtectDeviceNodesHostNamespace: called outside a container's mount
// namespace (not as a createContainer hook: the root's /proc is the
// image's folder, not the runtime's procfs), the hook mounts nothing,
// which would cover a file on the host, and says why.
func TestProtectDeviceNodesHostNamespace(t *testing.T) {
	host := filepath.Join(t.TempDir(), "params")
	os.WriteFile(host, []byte(hostParams), 0o444)
	b, root := bundle(t)
	os.MkdirAll(filepath.Join(root, "proc/driver/nvidia"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/driver/nvidia/params"), []byte("ModifyDeviceFiles: 1\n"), 0o644)
	before := testMounts(t)
	code, stderr := runHook(t, b, "setup", "--nvidia-params", host)
	if code != 0 || !strings.Contains(stderr, "not in the container's mount namespace") {
		t.Errorf("exit %d, stderr %q; want 0 and a warning", code, stderr)
	}
	if testMounts(t) != before {
		t.Errorf("the hook mounted in the host's namespace")
	}
}
