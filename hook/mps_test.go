package hook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ownRecord is a daemon record naming this test process, whose listeners
// then pass for the daemon.
func ownRecord(t *testing.T) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"daemonPID": %d, "daemonMountNS": %d}`, os.Getpid(), st.Ino)
}

// mpsDir makes <dir>/pipe and <dir>/device.json (when record is not
// empty) and returns the pipe folder.
func mpsDir(t *testing.T, record string) string {
	t.Helper()
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe")
	if err := os.Mkdir(pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	if record != "" {
		if err := os.WriteFile(filepath.Join(dir, "device.json"), []byte(record), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return pipe
}

func listen(t *testing.T, path string) {
	t.Helper()
	// The real daemon's socket type.
	ln, err := net.Listen("unixpacket", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
}

// mpsState makes a bundle whose config.json holds an MPS replica's
// mps-check call for each of pipes, as the spec's edits put them there,
// and returns the OCI state naming it.
func mpsState(t *testing.T, pipes ...string) []byte {
	t.Helper()
	b := t.TempDir()
	hooks := []map[string]any{{"path": "/usr/bin/gpuctk-hook", "args": []string{"gpuctk-hook", "setup", "--folder", "/usr/lib"}}}
	for i, p := range pipes {
		args := []string{"gpuctk-hook", "mps-check", "--pipe-dir", p, "--uuid", "GPU-x"}
		if i%2 == 1 {
			args = []string{"gpuctk-hook", "mps-check", "--uuid", "GPU-y", "--pipe-dir=" + p + "/"}
		}
		hooks = append(hooks, map[string]any{"path": "/usr/bin/gpuctk-hook", "args": args})
	}
	cfg, err := json.Marshal(map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"},
		"hooks": map[string]any{"createContainer": hooks},
		// CDI keeps the last mount at a path: one, whatever the devices.
		"mounts": []map[string]any{{"destination": "/tmp/nvidia-mps", "source": pipes[len(pipes)-1], "type": "bind"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": b})
	return st
}

func TestMPSCheck(t *testing.T) {
	const uuid = "GPU-13fe3248-4da8-65f8-e972-3f15eef51793"
	notRunning := "gpuctk-hook mps-check: MPS daemon for " + uuid + " is not running: run `gpuctk mps start` or start gpuctk-mps.service\n"
	own := ownRecord(t)

	live := mpsDir(t, own)
	listen(t, filepath.Join(live, "control"))

	// A socket file nobody listens on, as a daemon that died leaves it.
	stale := mpsDir(t, own)
	dead, err := net.Listen("unix", filepath.Join(stale, "control"))
	if err != nil {
		t.Fatal(err)
	}
	dead.(*net.UnixListener).SetUnlinkOnClose(false)
	dead.Close()

	// A tenant's own socket: the record names a daemon in another mount
	// namespace (pid 1's inode number is never this process's when
	// tests run in a container; a made-up one otherwise), or another pid.
	planted := mpsDir(t, `{"daemonPID": 1, "daemonMountNS": 4026531999}`)
	listen(t, filepath.Join(planted, "control"))
	otherPID := mpsDir(t, strings.Replace(own, fmt.Sprintf(`"daemonPID": %d`, os.Getpid()), `"daemonPID": 1`, 1))
	listen(t, filepath.Join(otherPID, "control"))
	noRecord := mpsDir(t, "")
	listen(t, filepath.Join(noRecord, "control"))

	// A link to a live socket is not followed.
	link := mpsDir(t, own)
	if err := os.Symlink(filepath.Join(live, "control"), filepath.Join(link, "control")); err != nil {
		t.Fatal(err)
	}
	// A FIFO at the socket's name, or at the record's, costs nothing.
	fifo := mpsDir(t, own)
	if err := unix.Mkfifo(filepath.Join(fifo, "control"), 0o666); err != nil {
		t.Fatal(err)
	}
	fifoRecord := mpsDir(t, "")
	if err := unix.Mkfifo(filepath.Join(filepath.Dir(fifoRecord), "device.json"), 0o666); err != nil {
		t.Fatal(err)
	}
	listen(t, filepath.Join(fifoRecord, "control"))
	linkRecord := mpsDir(t, "")
	if err := os.Symlink(filepath.Join(filepath.Dir(live), "device.json"), filepath.Join(filepath.Dir(linkRecord), "device.json")); err != nil {
		t.Fatal(err)
	}
	listen(t, filepath.Join(linkRecord, "control"))
	hugeRecord := mpsDir(t, own+strings.Repeat(" ", 2<<20))
	listen(t, filepath.Join(hugeRecord, "control"))

	other := mpsDir(t, own)
	listen(t, filepath.Join(other, "control"))
	twoDevices := "gpuctk-hook mps-check: the container is given MPS replicas of 2 devices, whose daemons' pipe folders (" + live + ", " + other +
		") are each bound at /tmp/nvidia-mps, where a client finds the one daemon it uses: give a container MPS replicas of one device only\n"

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
		pipes  []string // bound at /tmp/nvidia-mps in the container; default: the --pipe-dir
	}{
		{"running", []string{"--pipe-dir", live, "--uuid", uuid}, 0, "", nil},
		{"flags with =", []string{"--pipe-dir=" + live, "--uuid=" + uuid}, 0, "", nil},
		// Replicas of two devices: the client would reach one daemon.
		{"replicas of two devices", []string{"--pipe-dir", live, "--uuid", uuid}, 1, twoDevices, []string{live, other}},
		{"two replicas of one device", []string{"--pipe-dir", live, "--uuid", uuid}, 0, "", []string{live, live}},
		{"stale socket", []string{"--pipe-dir", stale, "--uuid", uuid}, 1, notRunning, nil},
		{"no pipe dir", []string{"--pipe-dir", filepath.Join(live, "none"), "--uuid", uuid}, 1, notRunning, nil},
		{"planted socket", []string{"--pipe-dir", planted, "--uuid", uuid}, 1, notRunning, nil},
		{"listener not the daemon", []string{"--pipe-dir", otherPID, "--uuid", uuid}, 1, notRunning, nil},
		{"no record", []string{"--pipe-dir", noRecord, "--uuid", uuid}, 1, notRunning, nil},
		{"socket is a link", []string{"--pipe-dir", link, "--uuid", uuid}, 1, notRunning, nil},
		{"socket is a FIFO", []string{"--pipe-dir", fifo, "--uuid", uuid}, 1, notRunning, nil},
		{"record is a FIFO", []string{"--pipe-dir", fifoRecord, "--uuid", uuid}, 1, notRunning, nil},
		{"record is a link", []string{"--pipe-dir", linkRecord, "--uuid", uuid}, 1, notRunning, nil},
		{"record over 1 MiB", []string{"--pipe-dir", hugeRecord, "--uuid", uuid}, 1, notRunning, nil},
		{"no uuid", []string{"--pipe-dir", live}, 1, "gpuctk-hook mps-check: --pipe-dir and --uuid are each needed once\n", nil},
		{"newer flag", []string{"--pipe-dir", live, "--uuid", uuid, "--timeout", "5s"}, 0, "gpuctk-hook: warning: unknown flag --timeout ignored\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			start := time.Now()
			pipes := tc.pipes
			for i, a := range tc.args {
				if tc.pipes != nil {
					break
				}
				if v, ok := strings.CutPrefix(a, "--pipe-dir="); ok {
					pipes = []string{v}
				} else if a == "--pipe-dir" && i+1 < len(tc.args) {
					pipes = []string{tc.args[i+1]}
				}
			}
			code := Main(append([]string{"mps-check"}, tc.args...), bytes.NewReader(mpsState(t, pipes...)), &stderr)
			if code != tc.code || stderr.String() != tc.stderr {
				t.Errorf("exit %d, stderr %q\nwant exit %d, stderr %q", code, stderr.String(), tc.code, tc.stderr)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("the check took %s", d)
			}
		})
	}
}
