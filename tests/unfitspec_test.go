package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// runWithin runs a command with a time bound; a command still running at
// its end fails the test, naming it.
func runWithin(t *testing.T, limit time.Duration, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// Its own process group, so that a child it left behind (the
	// runtime's resolve child, reading /dev/zero) goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	start := time.Now()
	select {
	case err := <-done:
		t.Logf("%s %s: %v", filepath.Base(cmd.Path), cmd.Args[1], time.Since(start).Round(time.Millisecond))
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return out.String(), errOut.String(), exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), 0
	case <-time.After(limit):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("%s %s did not finish in %v\nstderr: %.2000s", filepath.Base(cmd.Path), strings.Join(cmd.Args[1:], " "), limit, errOut.String())
	}
	return "", "", 0
}

// TestUnfitFileInSpecDir puts each unfit file beside gpuctk's spec in a
// spec dir: gpuctk-runtime create (through its `gpuctk cdi resolve`
// child), `gpuctk cdi list` and `gpuctk cdi generate --output` into that
// folder each finish at once, skip the file with one warning naming it,
// and still resolve our devices.
func TestUnfitFileInSpecDir(t *testing.T) {
	const limit = 15 * time.Second
	for _, uf := range fakehost.Unfit {
		t.Run(uf.Name, func(t *testing.T) {
			dir := t.TempDir()
			specDir := filepath.Join(dir, "cdi")
			cache, log := filepath.Join(dir, "cache"), filepath.Join(dir, "runtime.log")
			cfg := writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n[runtime]\nruntimes = [\"/bin/true\"]\nlog-file = %q\ncache-dir = %q\n", specDir, log, cache))
			spec := filepath.Join(specDir, "nvidia.yaml")
			generate := exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--config", cfg, "--output", spec)
			if _, stderr, code := runWithin(t, limit, generate); code != 0 {
				t.Fatalf("generate before the unfit file: exit %d: %s", code, stderr)
			}
			unfit := filepath.Join(specDir, "other-vendor.yaml")
			if err := uf.Make(unfit); err != nil {
				t.Fatal(err)
			}
			// What each command must say of it, once.
			said := func(what, out string) {
				t.Helper()
				if n := strings.Count(out, unfit); n != 1 || uf.Says != "" && !strings.Contains(out, uf.Says) {
					t.Errorf("%s names %s %d times (want once, saying %q):\n%s", what, unfit, n, uf.Says, out)
				}
			}

			// gpuctk-runtime create resolves GPU 0 beside the unfit file.
			time.Sleep(60 * time.Millisecond) // out of the runtime's racy window
			bundle := filepath.Join(dir, "bundle")
			os.MkdirAll(bundle, 0o755)
			doc, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"},
				"process": map[string]any{"args": []string{"sh"}, "env": []string{"NVIDIA_VISIBLE_DEVICES=0"}, "cwd": "/"}, "linux": map[string]any{}})
			configJSON := filepath.Join(bundle, "config.json")
			if err := os.WriteFile(configJSON, doc, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"first", "cached"} {
				create := exec.Command(bin("gpuctk-runtime"), "create", "--bundle", bundle, "unfit-"+id)
				create.Env = []string{"GPUCTK_CONFIG=" + cfg, "PATH=/usr/bin:/bin"}
				if _, stderr, code := runWithin(t, limit, create); code != 0 {
					logged, _ := os.ReadFile(log)
					t.Fatalf("%s create: exit %d: %s\nlog: %s", id, code, stderr, logged)
				}
				var got struct {
					Process struct{ Env []string } `json:"process"`
					Linux   struct {
						Devices []struct{ Path string } `json:"devices"`
					} `json:"linux"`
				}
				data, _ := os.ReadFile(configJSON)
				if err := json.Unmarshal(data, &got); err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(got.Process.Env, "NVIDIA_VISIBLE_DEVICES=void") || !slices.ContainsFunc(got.Linux.Devices, func(d struct{ Path string }) bool { return d.Path == "/dev/nvidia0" }) {
					t.Errorf("%s create did not inject GPU 0: %s", id, data)
				}
				os.WriteFile(configJSON, doc, 0o644)
			}
			logged, _ := os.ReadFile(log)
			said("the runtime's log", string(logged))

			// cdi list lists our devices and warns of the file.
			list := exec.Command(bin("gpuctk"), "cdi", "list", "--config", cfg, "--spec-dir", specDir)
			stdout, stderr, code := runWithin(t, limit, list)
			if code != 0 || !strings.Contains(stdout, "nvidia.com/gpu=0 ") {
				t.Errorf("cdi list: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			said("cdi list", stderr)

			// generate --output into the folder writes and warns.
			generate = exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--config", cfg, "--output", spec)
			_, stderr, code = runWithin(t, limit, generate)
			if code != 0 || !strings.Contains(stderr, "wrote nvidia.com/gpu spec to "+spec) {
				t.Errorf("cdi generate: exit %d: %s", code, stderr)
			}
			said("cdi generate", stderr)
		})
	}
}
