package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/hook"
)

// TestRun drives the command line: help and version, forward
// compatibility (unknown subcommands and flags warn and exit 0), and bad
// input (one line, non-zero).
func TestRun(t *testing.T) {
	bundle := t.TempDir()
	os.MkdirAll(filepath.Join(bundle, "rootfs"), 0o755)
	// The links' targets: the hook makes a link only to what is there.
	for _, lib := range []string{"libx.so.1", "liby.so.1"} {
		os.WriteFile(filepath.Join(bundle, "rootfs", lib), nil, 0o644)
	}
	os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"root":{"path":"rootfs"}}`), 0o644)
	st, _ := json.Marshal(map[string]any{"bundle": bundle})
	for _, tc := range []struct {
		name     string
		args     []string
		stdin    string
		code     int
		env      map[string]string
		want     string // in stderr
		wantOut  string // in stdout
		warnings bool
		silent   bool // nothing on stderr
	}{
		// Log levels: a global flag the spec may carry, or the hook's
		// environment; specs without either keep working (the cases below).
		{name: "debug flag", args: []string{"--debug", "setup", "--link", "libx.so.1::/libx.so"}, stdin: string(st), want: "gpuctk-hook: debug: link /libx.so -> libx.so.1"},
		{name: "debug env", args: []string{"setup", "--link", "liby.so.1::/liby.so"}, env: map[string]string{"GPUCTK_DEBUG": "1"}, stdin: string(st), want: "gpuctk-hook: debug: link /liby.so"},
		{name: "quiet flag", args: []string{"--quiet", "setup", "--colour", "red"}, stdin: string(st), silent: true},
		{name: "quiet env", args: []string{"frobnicate"}, env: map[string]string{"GPUCTK_QUIET": "true"}, silent: true},
		{name: "quiet still fails loudly", args: []string{"--quiet", "setup", "--link", "nolink"}, stdin: string(st), code: 1, want: "want TARGET::/ABSOLUTE/LINK"},
		{name: "bad env", args: []string{"--help"}, env: map[string]string{"GPUCTK_DEBUG": "yes"}, want: `GPUCTK_DEBUG="yes" is not true or false`, wantOut: "Usage:", warnings: true},
		{name: "help", args: []string{"--help"}, wantOut: "Usage: gpuctk-hook [--debug|--quiet] SUBCOMMAND"},
		{name: "setup help", args: []string{"setup", "--help"}, wantOut: "Usage: gpuctk-hook [--debug|--quiet] SUBCOMMAND"},
		{name: "version", args: []string{"--version"}, wantOut: "gpuctk-hook v1.2.3"},
		{name: "no subcommand", args: nil, code: 2, want: "no subcommand"},
		{name: "unknown subcommand", args: []string{"frobnicate", "--x", "1"}, want: `unknown subcommand "frobnicate" ignored`, warnings: true},
		{name: "unknown flag", args: []string{"setup", "--colour", "red", "--colour=blue"}, stdin: string(st), want: "unknown flag --colour ignored", warnings: true},
		{name: "bad link", args: []string{"setup", "--link", "nolink"}, stdin: string(st), code: 1, want: "want TARGET::/ABSOLUTE/LINK"},
		{name: "flag without value", args: []string{"setup", "--folder"}, code: 1, want: "flag --folder needs a value"},
		{name: "unknown flag last, without value", args: []string{"setup", "--colour"}, stdin: string(st), want: "unknown flag --colour ignored", warnings: true},
		{name: "bad state", args: []string{"setup", "--folder", "/usr/lib"}, stdin: "{not json", code: 1, want: "OCI state on stdin"},
		{name: "mps-check without uuid", args: []string{"mps-check", "--pipe-dir", "/run/x/pipe"}, code: 1, want: "--pipe-dir and --uuid are each needed once"},
		{name: "mps-check with a newer flag", args: []string{"mps-check", "--pipe-dir", "/nonexistent/pipe", "--uuid", "GPU-x", "--timeout", "5s", "--help"},
			want: "unknown flag --timeout ignored", wantOut: "Usage: gpuctk-hook [--debug|--quiet] SUBCOMMAND", warnings: true},
		{name: "mps-check, no daemon", args: []string{"mps-check", "--pipe-dir=/nonexistent/pipe", "--uuid", "GPU-x"}, code: 1,
			want: "gpuctk-hook mps-check: MPS daemon for GPU-x is not running: run `gpuctk mps start`"},
		{name: "mps-check help", args: []string{"mps-check", "--help"}, wantOut: "Usage: gpuctk-hook [--debug|--quiet] SUBCOMMAND"},
		{name: "missing bundle", args: []string{"setup", "--folder", "/usr/lib"}, stdin: `{"bundle":"/nonexistent"}`, code: 1, want: "bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, func(k string) string { return tc.env[k] }, strings.NewReader(tc.stdin), &stdout, &stderr, "v1.2.3")
			if tc.silent && stderr.Len() > 0 {
				t.Errorf("stderr %q, want nothing", stderr.String())
			}
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stdout.String(), tc.wantOut) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, %q in stderr, %q in stdout", code, stdout.String(), stderr.String(), tc.code, tc.want, tc.wantOut)
			}
			if !tc.warnings && strings.Contains(stderr.String(), "warning") {
				t.Errorf("unexpected warning: %q", stderr.String())
			}
			if code != 0 && strings.Count(strings.TrimSpace(stderr.String()), "\n") > 0 {
				t.Errorf("error is more than one line: %q", stderr.String())
			}
		})
	}
}

// FuzzParseSetup feeds arbitrary argument lists to setup's flag parser.
func FuzzParseSetup(f *testing.F) {
	f.Add("--link\x00a::/b\x00--folder\x00/usr/lib")
	f.Add("--x=1\x00--link")
	f.Add("--ldconfig-timeout\x00-1s")
	f.Add("--driver-file\x00/usr/lib/gpuctk/core/nvidia-smi::/usr/bin/nvidia-smi")
	f.Fuzz(func(t *testing.T, joined string) {
		var o hook.SetupOptions
		parseSetup(io.Discard, strings.Split(joined, "\x00"), &o)
	})
}
