package tests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestUsageMistakes calls gpuctk wrongly as a user might: each mistake is
// exit status 2, nothing on stdout (a redirect gets no half spec), and on
// stderr one line saying what is wrong plus where the usage is.
func TestUsageMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cdi", "generate", "--simulat", "dgx-a100"}, `unknown flag "simulat": did you mean --simulate?`},
		{[]string{"cdi", "genrate"}, `"genrate" is not a command of gpuctk cdi: did you mean "generate"?`},
		{[]string{"mps", "stauts"}, `did you mean "status"?`},
		{[]string{"cdi", "generate", "--simulate", "l40s", "extra"}, `unexpected argument "extra"`},
		{[]string{"labels", "--simulate", "l40s", "x"}, `unexpected argument "x"`},
		{[]string{"config", "import-device-plugin"}, "want one FILE"},
		{[]string{"--no-such-flag"}, `unknown flag "no-such-flag"`},
		{[]string{"runtime", "configure", "--dry-run"}, "--runtime is missing: the engine to configure: containerd, crio, docker or podman"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin("gpuctk"), tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("exit: %v, want status 2", err)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout is not empty:\n%s", stdout.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], tc.want) || !strings.HasSuffix(lines[1], "--help' for usage.") {
				t.Errorf("stderr:\n%s\nwant %q and where the usage is", stderr.String(), tc.want)
			}
		})
	}
}

// TestCompletion sources the bash completion script as bash does and asks
// it for what may follow "gpuctk cdi ge" and "gpuctk mps start --sim".
func TestCompletion(t *testing.T) {
	script := filepath.Join(t.TempDir(), "gpuctk.bash")
	if err := os.WriteFile(script, []byte(run(t, bin("gpuctk"), "completion", "bash")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"gpuctk", "cdi", "ge"}, "generate"},
		{[]string{"gpuctk", "mps", "start", "--sim"}, "--simulate"},
		{[]string{"gpuctk", "lab"}, "labels"},
	} {
		sh := fmt.Sprintf(`PATH=%s:$PATH; source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _gpuctk; echo "${COMPREPLY[*]}"`,
			filepath.Dir(bin("gpuctk")), script, strings.Join(tc.words, " "), len(tc.words)-1)
		out := strings.TrimSpace(run(t, "bash", "-c", sh))
		if out != tc.want {
			t.Errorf("%v: completions %q, want %q", tc.words, out, tc.want)
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		if out := run(t, bin("gpuctk"), "completion", shell); !strings.Contains(out, "gpuctk") {
			t.Errorf("%s script:\n%s", shell, out)
		}
	}
}

// TestDeviceNameStrategy generates with nvidia-ctk's flag (and its
// GPUCTK_ variable) and lists the names back as a runtime resolves them.
func TestDeviceNameStrategy(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want []string
	}{
		{[]string{"--device-name-strategy", "type-index"}, "", []string{"nvidia.com/gpu=all", "nvidia.com/gpu=gpu0", "nvidia.com/gpu=gpu3", "nvidia.com/gpu=gpu4", "nvidia.com/gpu=mig4:0", "nvidia.com/gpu=mig7:3"}},
		{nil, "GPUCTK_DEVICE_NAME_STRATEGY=index", []string{"nvidia.com/gpu=0", "nvidia.com/gpu=3", "nvidia.com/gpu=all", "nvidia.com/gpu=mig-0", "nvidia.com/gpu=mig-15"}},
	} {
		dir := t.TempDir()
		cmd := exec.Command(bin("gpuctk"), append([]string{"cdi", "generate", "--simulate", "dgx-a100", "--config", writeConfig(t, ""), "--output", filepath.Join(dir, "nvidia.yaml")}, tc.args...)...)
		cmd.Env = append(os.Environ(), tc.env)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		list := run(t, bin("gpuctk"), "cdi", "list", "--spec-dir", dir, "--config", writeConfig(t, ""))
		// Capability devices (capability-graphics, ...) are no GPU.
		names := slices.DeleteFunc(lines(list)[1:], func(l string) bool { return strings.Contains(l, "=capability-") })
		if n := len(names); n != 8+16+1 {
			t.Errorf("%v %s: %d names, want one per device and all:\n%s", tc.args, tc.env, n, list)
		}
		for _, w := range tc.want {
			if !strings.Contains(list, w+" ") {
				t.Errorf("%v %s: no %s in\n%s", tc.args, tc.env, w, list)
			}
		}
	}
}

// TestOutputNames checks --output's messages: a name CDI readers skip is
// written with a warning; a folder the user cannot write is one line
// naming the destination (not a temporary file) and saying root is needed.
func TestOutputNames(t *testing.T) {
	dir := t.TempDir()
	txt := filepath.Join(dir, "nvidia.txt")
	var stderr bytes.Buffer
	cmd := exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", "l40s", "--config", writeConfig(t, ""), "--output", txt)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "gpuctk: warning: "+txt+" will not be read by CDI runtimes") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if _, err := os.Stat(txt); err != nil {
		t.Error(err)
	}

	// "-" is standard output: no file of that name.
	cmd = exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", "l40s", "--config", writeConfig(t, ""), "--output", "-")
	cmd.Dir = dir
	spec, err := cmd.Output()
	if err != nil || !bytes.Contains(spec, []byte("\ncdiVersion: ")) {
		t.Errorf("--output -: %v, stdout %.40q", err, spec)
	}
	if _, err := os.Lstat(filepath.Join(dir, "-")); !os.IsNotExist(err) {
		t.Errorf("--output - wrote a file named -: %v", err)
	}

	// As nobody, into a folder only root may write.
	os.Chmod(dir, 0o755)
	gpuctk := filepath.Join(dir, "gpuctk")
	copyFile(t, bin("gpuctk"), gpuctk, 0o755)
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", gpuctk,
		"cdi", "generate", "--simulate", "l40s", "--output", filepath.Join(dir, "nvidia.yaml")).CombinedOutput()
	want := "gpuctk: write spec " + filepath.Join(dir, "nvidia.yaml") + ": permission denied: writing there needs root (run with sudo) or choose another --output\n"
	if err == nil || string(out) != want {
		t.Errorf("%v: %q, want %q", err, out, want)
	}
}

// TestQuietAndDebug checks --quiet (errors only) and --debug (where things
// come from), before or after the command and as GPUCTK_ variables.
func TestQuietAndDebug(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string // on stderr; "" for nothing
	}{
		{[]string{"--quiet", "cdi", "generate", "--simulate", "l40s"}, "", ""},
		{[]string{"cdi", "generate", "--simulate", "l40s", "-q"}, "", ""},
		{[]string{"cdi", "generate", "--simulate", "l40s"}, "GPUCTK_QUIET=true", ""},
		{[]string{"--debug", "cdi", "generate", "--simulate", "l40s"}, "", "gpuctk: debug: host from the simulated profile l40s"},
		{[]string{"cdi", "generate", "--simulate", "l40s", "--debug"}, "", "gpuctk: debug: driver files: a standard install of 580.65.06"},
		{[]string{"cdi", "generate", "--simulate", "l40s"}, "GPUCTK_DEBUG=1", "gpuctk: debug: "},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin("gpuctk"), append(tc.args, "--config", writeConfig(t, ""))...)
		cmd.Env = append(os.Environ(), tc.env)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v %s: %v: %s", tc.args, tc.env, err, stderr.String())
		}
		if !strings.HasPrefix(stdout.String(), "# Written by gpuctk.\n---\ncdiVersion:") {
			t.Errorf("%v %s: no spec on stdout", tc.args, tc.env)
		}
		if got := stderr.String(); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%v %s: stderr %q, want %q", tc.args, tc.env, got, tc.want)
		}
	}
	// An error is printed under --quiet too.
	out, err := exec.Command(bin("gpuctk"), "--quiet", "cdi", "generate", "--simulate", "nosuch").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `simulated host "nosuch" is not known`) {
		t.Errorf("--quiet error: %v %q", err, out)
	}
}
