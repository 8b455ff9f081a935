package main

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuctk/gpuctk/mps"
	"github.com/gpuctk/gpuctk/offer"
)

// TestDownError: `gpuctk mps status` exits 3 when a daemon the
// configuration asks for does not answer, and says what to do. Found in
// review: for a daemon that runs but does not answer it said "start it
// with `gpuctk mps start`", which then refused such a device; start now
// ends such a daemon and starts another.
func TestDownError(t *testing.T) {
	dev := &offer.Share{}
	for _, tc := range []struct {
		name string
		sts  []mps.Status
		want string // "" for no error
	}{
		{"all answering", []mps.Status{{Device: dev, Configured: true, Answering: true}}, ""},
		{"not configured", []mps.Status{{Device: dev}}, ""},
		{"one not running", []mps.Status{{Device: dev, Configured: true, Answering: true}, {Device: dev, Configured: true}},
			"1 of the 2 MPS daemons the configuration asks for is not running: start it with `gpuctk mps start`"},
		{"two not running", []mps.Status{{Device: dev, Configured: true}, {Device: dev, Configured: true}},
			"2 of the 2 MPS daemons the configuration asks for are not running: start them with `gpuctk mps start`"},
		{"one not answering", []mps.Status{{Device: dev, Configured: true, PID: 1234}},
			"1 of the 1 MPS daemons the configuration asks for does not answer: restart it with `gpuctk mps start`"},
		{"two not answering", []mps.Status{{Device: dev, Configured: true, PID: 1234}, {Device: dev, Configured: true, PID: 1235}},
			"2 of the 2 MPS daemons the configuration asks for do not answer: restart them with `gpuctk mps start`"},
		{"one not running, one not answering", []mps.Status{{Device: dev, Configured: true}, {Device: dev, Configured: true, PID: 1234}},
			"2 of the 2 MPS daemons the configuration asks for are not running or do not answer: start them with `gpuctk mps start`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := downError(tc.sts)
			if tc.want == "" {
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
				return
			}
			var x *exitError
			if !errors.As(err, &x) || x.code != 3 || err.Error() != tc.want {
				t.Errorf("error %v\nwant exit 3, %s", err, tc.want)
			}
		})
	}
}

// TestNotifyReady: under a Type=notify unit (gpuctk-mps.service) mps run
// tells systemd READY=1 on $NOTIFY_SOCKET; without one it does nothing.
func TestNotifyReady(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	if err := notifyReady(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Errorf("systemd got %q, %v", buf[:n], err)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := notifyReady(); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v", err)
	}
}
