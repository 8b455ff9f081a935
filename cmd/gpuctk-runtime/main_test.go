package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// build builds gpuctk-runtime, stamped with version, into a temp folder.
func build(t *testing.T, version string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpuctk-runtime")
	cmd := exec.Command("go", "build", "-ldflags", "-X github.com/gpuctk/gpuctk/internal/version.Version="+version, "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestCommandLine(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("runc is not installed: run make test, which installs it")
		}
		t.Skip("needs runc (make test installs it as root)")
	}
	bin := build(t, "1.2.3-test")
	dir := t.TempDir()
	good := filepath.Join(dir, "config.toml")
	os.WriteFile(good, []byte("[runtime]\nruntimes = [\""+runc+"\"]\nlog-file = \""+filepath.Join(dir, "log")+"\"\n"), 0o644)
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[runtime\n"), 0o644)
	runcVersion, _ := exec.Command(runc, "--version").Output()
	runcCreateHelp, _ := exec.Command(runc, "create", "--help").Output()
	runcGlobalHelp, _ := exec.Command(runc, "--help", "create").Output()

	tests := []struct {
		name    string
		args    []string
		config  string
		want    string // stdout, exactly
		wantErr string // the one line on stderr, in part
	}{
		{name: "version", args: []string{"--version"}, config: good,
			want: "gpuctk-runtime version 1.2.3-test\n" + string(runcVersion)},
		{name: "v", args: []string{"-v"}, config: good,
			want: "gpuctk-runtime version 1.2.3-test\n" + string(runcVersion)},
		// runc's help, not a create of the current folder's bundle.
		{name: "create help", args: []string{"create", "--help"}, config: good, want: string(runcCreateHelp)},
		{name: "help before create", args: []string{"--help", "create"}, config: good, want: string(runcGlobalHelp)},
		// A broken configuration must not stop containers from being
		// listed or deleted; it fails create.
		{name: "broken config, version", args: []string{"--version"}, config: bad,
			want: "gpuctk-runtime version 1.2.3-test\n" + string(runcVersion)},
		{name: "broken config, create", args: []string{"create", "--bundle", dir, "c1"}, config: bad,
			wantErr: "gpuctk-runtime: create c1: config " + bad + ": line 1 column 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = append(os.Environ(), configEnv+"="+tt.config)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(stderr.String(), tt.wantErr) || strings.Count(stderr.String(), "\n") != 1 {
					t.Errorf("%v: err %v, stderr %q; want a failure with one line starting %q", tt.args, err, stderr.String(), tt.wantErr)
				}
				return
			}
			if err != nil || string(out) != tt.want {
				t.Errorf("%v: %v, stdout %q, stderr %q; want stdout %q", tt.args, err, out, stderr.String(), tt.want)
			}
		})
	}
}
