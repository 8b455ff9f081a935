package hook

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckMPS(t *testing.T) {
	const uuid = "GPU-13fe3248-4da8-65f8-e972-3f15eef51793"
	want := "MPS daemon for " + uuid + " is not running: run `gpuctk mps start` or start gpuctk-mps.service"

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
		name string
		args []string
		want string
	}{
		{"running", []string{"--pipe-dir", live, "--uuid", uuid}, ""},
		{"stale socket", []string{"--pipe-dir", stale, "--uuid", uuid}, want},
		{"no pipe dir", []string{"--pipe-dir", filepath.Join(live, "none"), "--uuid", uuid}, want},
		{"no uuid", []string{"--pipe-dir", live}, "--pipe-dir and --uuid are required"},
		{"unknown flag", []string{"--pipe", live}, "mps-check: flag provided but not defined: -pipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMPS(tc.args)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if tc.want == want && err.Error() != want {
				t.Fatalf("err = %q, want exactly %q", err, want)
			}
		})
	}
}
