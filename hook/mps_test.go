package hook

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestMPSCheck(t *testing.T) {
	const uuid = "GPU-13fe3248-4da8-65f8-e972-3f15eef51793"
	notRunning := "gpuctk-hook mps-check: MPS daemon for " + uuid + " is not running: run `gpuctk mps start` or start gpuctk-mps.service\n"

	live := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(live, "control"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// A socket file nobody listens on, as a daemon that died leaves it.
	stale := t.TempDir()
	dead, err := net.Listen("unix", filepath.Join(stale, "control"))
	if err != nil {
		t.Fatal(err)
	}
	dead.(*net.UnixListener).SetUnlinkOnClose(false)
	dead.Close()
	if _, err := os.Stat(filepath.Join(stale, "control")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"running", []string{"--pipe-dir", live, "--uuid", uuid}, 0, ""},
		{"flags with =", []string{"--pipe-dir=" + live, "--uuid=" + uuid}, 0, ""},
		{"stale socket", []string{"--pipe-dir", stale, "--uuid", uuid}, 1, notRunning},
		{"no pipe dir", []string{"--pipe-dir", filepath.Join(live, "none"), "--uuid", uuid}, 1, notRunning},
		{"no uuid", []string{"--pipe-dir", live}, 1, "gpuctk-hook mps-check: --pipe-dir and --uuid are each needed once\n"},
		{"newer flag", []string{"--pipe-dir", live, "--uuid", uuid, "--timeout", "5s"}, 0, "gpuctk-hook: warning: unknown flag --timeout ignored\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			// The check reads no OCI state.
			code := Main(append([]string{"mps-check"}, tc.args...), bytes.NewReader(nil), &stderr)
			if code != tc.code || stderr.String() != tc.stderr {
				t.Errorf("exit %d, stderr %q\nwant exit %d, stderr %q", code, stderr.String(), tc.code, tc.stderr)
			}
		})
	}
}
