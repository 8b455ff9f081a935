package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runWithin runs create and fails the test if it has not returned after
// 5 s: a log open that blocks would hang every container start.
func runWithin(t *testing.T, f *fixture) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f.rt.Run([]string{"create", "--bundle", f.bundle, "ctr1"}) }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("create still running after 5 s")
		return nil
	}
}

// TestHostileLogPath: whatever sits at the log path, the container starts
// and nothing is written through a link or into a FIFO or device.
func TestHostileLogPath(t *testing.T) {
	tests := []struct {
		name  string
		plant func(t *testing.T, path string) (check func(t *testing.T))
	}{
		{"symlink to a file", func(t *testing.T, path string) func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "target")
			os.WriteFile(target, nil, 0o600)
			os.Symlink(target, path)
			return func(t *testing.T) {
				if data, _ := os.ReadFile(target); len(data) != 0 {
					t.Errorf("log written through a symlink: %q", data)
				}
			}
		}},
		{"dangling symlink", func(t *testing.T, path string) func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "created")
			os.Symlink(target, path)
			return func(t *testing.T) {
				if _, err := os.Lstat(target); err == nil {
					t.Error("log created through a dangling symlink")
				}
			}
		}},
		{"FIFO without a reader", func(t *testing.T, path string) func(t *testing.T) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			return func(*testing.T) {}
		}},
		{"FIFO with a reader", func(t *testing.T, path string) func(t *testing.T) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			return func(t *testing.T) {
				buf := make([]byte, 64)
				if n, _ := r.Read(buf); n > 0 {
					t.Errorf("log written into a FIFO: %q", buf[:n])
				}
			}
		}},
		{"folder", func(t *testing.T, path string) func(t *testing.T) {
			os.Mkdir(path, 0o700)
			return func(*testing.T) {}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, withEnv("mig-0"))
			check := tt.plant(t, f.log)
			if err := runWithin(t, f); err != nil {
				t.Fatalf("create: %v", err)
			}
			if len(f.calls) != 1 {
				t.Errorf("exec calls = %q, want one", f.calls)
			}
			check(t)
		})
	}
}

// TestLogLinesAreBounded: a message quoting what the image wrote stays
// short in the log and in the error.
func TestLogLinesAreBounded(t *testing.T) {
	f := newFixture(t, withEnv("x"+strings.Repeat("y", 1<<20)))
	err := runWithin(t, f)
	if err == nil || !strings.Contains(err.Error(), "unknown device nvidia.com/gpu=xyyy") || len(err.Error()) > 2000 {
		t.Fatalf("error = %.300q... (%d bytes), want a short unknown-device error", err, len(err.Error()))
	}
	logged, _ := os.ReadFile(f.log)
	for line := range bytes.Lines(logged) {
		if len(line) > 5000 {
			t.Errorf("log line of %d bytes", len(line))
		}
	}
}

func TestLogLevelFromEnv(t *testing.T) {
	tests := []struct {
		env     map[string]string
		want    string
		wantErr string
	}{
		{nil, "", ""},
		{map[string]string{"GPUCTK_LOG_LEVEL": "debug"}, "debug", ""},
		{map[string]string{"GPUCTK_LOG_LEVEL": "error", "GPUCTK_DEBUG": "1"}, "error", ""},
		{map[string]string{"GPUCTK_DEBUG": "true"}, "debug", ""},
		{map[string]string{"GPUCTK_QUIET": "1"}, "error", ""},
		{map[string]string{"GPUCTK_DEBUG": "0", "GPUCTK_QUIET": "1"}, "error", ""},
		{map[string]string{"GPUCTK_LOG_LEVEL": "verbose"}, "", `GPUCTK_LOG_LEVEL="verbose" is not a log level: use debug, info or error`},
		{map[string]string{"GPUCTK_QUIET": "yes"}, "", `GPUCTK_QUIET="yes" is not true or false`},
	}
	for _, tt := range tests {
		got, err := LogLevelFromEnv(func(k string) string { return tt.env[k] })
		if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%v: %q, %v; want %q, %q", tt.env, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestLogLevels: quiet logs failures only, debug what runc's --debug
// would, in both the own log and runc's --log.
func TestLogLevels(t *testing.T) {
	for _, tt := range []struct {
		level     string
		runcDebug bool
		want      []string
	}{
		{"", false, []string{"info", "error"}},
		{"", true, []string{"debug", "info", "error"}},
		{"debug", false, []string{"debug", "info", "error"}},
		{"error", false, []string{"error"}},
	} {
		dir := t.TempDir()
		own, runcLog := filepath.Join(dir, "own.log"), filepath.Join(dir, "runc.log")
		l := newLogger(own, invocation{debug: tt.runcDebug, logFile: runcLog}, tt.level)
		l.Debugf("d")
		l.Infof("i")
		l.Errorf("e")
		l.Close()
		for _, path := range []string{own, runcLog} {
			data, _ := os.ReadFile(path)
			var got []string
			for _, lvl := range []string{"debug", "info", "error"} {
				if strings.Contains(string(data), "level="+lvl) {
					got = append(got, lvl)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("level %q, runc --debug %v: %s has %v, want %v", tt.level, tt.runcDebug, filepath.Base(path), got, tt.want)
			}
		}
	}
}
