package tests

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuctk/gpuctk/internal/pagecache"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"
)

// TestGenerateBadInput runs the built gpuctk on broken hosts and configs:
// each fails with one line naming the problem, exits non-zero, and leaves
// an existing spec file as it was.
func TestGenerateBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{"driver root missing", func(t *testing.T) []string {
			return []string{"--simulate", "dgx-a100", "--driver-root", "/nonexistent/driver"}
		}, "driver root /nonexistent/driver: stat /nonexistent/driver: no such file or directory"},
		{"empty host", func(t *testing.T) []string {
			p := filepath.Join(t.TempDir(), "empty.toml")
			os.WriteFile(p, []byte("driver-version = \"580.65.06\"\n"), 0o644)
			return []string{"--simulate", p}
		}, "no NVIDIA GPUs found on this host"},
		{"unreadable ld.so.cache", func(t *testing.T) []string {
			root, _ := fakeDriverRoot(t, "l40s")
			os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), []byte("glibc-ld.so.cache1.1\x00garbage"), 0o644)
			return []string{"--simulate", "l40s", "--driver-root", root}
		}, "/etc/ld.so.cache: not an ld.so.cache this package can read: header truncated"},
		{"GKE's libraries without a search path", func(t *testing.T) []string {
			p, err := inventory.LoadProfile("h100")
			if err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(t.TempDir(), "driver")
			if err := fakehost.BuildGKE(root, p); err != nil {
				t.Fatal(err)
			}
			return []string{"--simulate", "h100", "--driver-root", root}
		}, "is driver 580.65.06 installed there? (give a folder no linker cache lists with --library-search-path)"},
		{"relative library search path", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--library-search-path", "lib64"}
		}, `"library-search-paths" holds "lib64", not an absolute path`},
		{"malformed config", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", writeConfig(t, "[[sharing]]\ndevices = [\"0\"\n")}
		}, "config "},
		{"config rule", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", writeConfig(t, "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 1\n")}
		}, "[[sharing]] entry 1: \"replicas\" is 1: a shared device needs at least 2 replicas"},
		{"unknown replica name style", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", writeConfig(t, "[cdi]\nreplica-names = [\"index\", \"serial\"]\n")}
		}, `[cdi] "replica-names" value "serial" is not known: use "index", "uuid", "gpu:mig" or "type-index"`},
		{"no replica name style", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", writeConfig(t, "[cdi]\nreplica-names = []\n")}
		}, `[cdi] "replica-names" is empty`},
		{"replicas left without a name", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", writeConfig(t, "[cdi]\nreplica-names = [\"gpu:mig\"]\n[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n")}
		}, `[cdi] "replica-names" ["gpu:mig"] gives the replicas of GPU 0 (shared by [[sharing]] entry 1) no name: add "index" or "uuid"`},
		{"selector matches nothing", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", writeConfig(t, "[[sharing]]\ndevices = [\"mig-0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n")}
		}, `[[sharing]] entry 1: selector "mig-0" matches no device on this host`},
		{"two entries claim a device", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", writeConfig(t, "[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n[[sharing]]\ndevices = [\"1\"]\nstrategy = \"mps\"\nreplicas = 2\n")}
		}, "[[sharing]] entry 2: GPU 1 is already shared by entry 1"},
		{"config file missing", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", "/nonexistent/config.toml"}
		}, "config /nonexistent/config.toml: open /nonexistent/config.toml: no such file or directory"},
		{"unknown profile", func(t *testing.T) []string {
			return []string{"--simulate", "a100-typo"}
		}, `simulated host "a100-typo" is not known: use one of`},
		{"MPS state root too long, as mps start refuses it", func(t *testing.T) []string {
			return []string{"--simulate", "dgx-a100", "--config", writeConfig(t, "[mps]\nstate-root = \""+longStateRoot+"\"\n[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 2\n")}
		}, "[[sharing]] entry 1: MPS device GPU 0 (" + dgxGPU0 + "): its control socket " + longStateRoot + "/" + dgxGPU0 + "/pipe/control_privileged is 138 bytes long, over the 107 a unix socket allows: choose a shorter [mps] state-root"},
		{"bad format", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--format", "xml"}
		}, `format "xml" is not known: use yaml or json`},
		// Files a user names are read to a bound, not to the end of a device.
		{"config is an endless device", func(t *testing.T) []string {
			return []string{"--simulate", "l40s", "--config", "/dev/zero"}
		}, "config /dev/zero: read /dev/zero: more than 4 MiB, too large for this file: check the path"},
		{"profile is an endless device", func(t *testing.T) []string {
			return []string{"--simulate", "/dev/zero"}
		}, "simulated host profile: read /dev/zero: more than 4 MiB, too large for this file: check the path"},
		{"output is a FIFO, not renamed over", func(t *testing.T) []string {
			fifo := filepath.Join(t.TempDir(), "nvidia.yaml")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
					t.Errorf("the FIFO was replaced: %v", err)
				}
			})
			return []string{"--simulate", "l40s", "--output", fifo}
		}, "nvidia.yaml: it is a FIFO, not a file: name a file to write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := filepath.Join(t.TempDir(), "nvidia.yaml")
			os.WriteFile(spec, []byte("old spec\n"), 0o644)
			args := append([]string{"cdi", "generate", "--output", spec}, tc.args(t)...)
			out, err := exec.Command(bin("gpuctk"), args...).CombinedOutput()
			if err == nil {
				t.Fatalf("generate succeeded:\n%s", out)
			}
			if l := lines(string(out)); len(l) != 1 || !strings.Contains(l[0], tc.want) {
				t.Errorf("output %q, want one line containing %q", out, tc.want)
			}
			if b, _ := os.ReadFile(spec); string(b) != "old spec\n" {
				t.Errorf("spec file changed: %q", b)
			}
			if entries, _ := os.ReadDir(filepath.Dir(spec)); len(entries) != 1 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
}

// TestGenerateMainJob is the README's main command: a spec for the
// embedded DGX A100 on stdout and a summary on stderr.
func TestGenerateMainJob(t *testing.T) {
	cmd := exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--config", writeConfig(t, ""))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if !strings.HasPrefix(string(out), "# Written by gpuctk.\n---\ncdiVersion: \"0.5.0\"\nkind: \"nvidia.com/gpu\"\n") {
		t.Errorf("spec starts %q", string(out[:60]))
	}
	if got := strings.TrimSpace(stderr.String()); got != "gpuctk: nvidia.com/gpu spec: 8 GPUs, 16 MIG devices, 0 replicas, 65 device names" {
		t.Errorf("summary = %q", got)
	}
	// The written spec lists back through gpuctk cdi list.
	dir := t.TempDir()
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--config", writeConfig(t, ""), "--output", filepath.Join(dir, "nvidia.json"))
	list := run(t, bin("gpuctk"), "cdi", "list", "--spec-dir", dir, "--config", writeConfig(t, ""))
	// 65 device names and the 7 capability devices of a standard install.
	if l := lines(list); len(l) != 73 || !strings.HasPrefix(l[1], "nvidia.com/gpu=0 ") || !strings.Contains(list, "nvidia.com/gpu=mig-15 ") {
		t.Errorf("cdi list:\n%s", list)
	}
	// The same as JSON (--json is --format json) and as YAML.
	for _, args := range [][]string{{"--format", "json"}, {"--json"}, {"--format", "yaml"}} {
		out := run(t, bin("gpuctk"), append([]string{"cdi", "list", "--spec-dir", dir, "--config", writeConfig(t, "")}, args...)...)
		var got []map[string]any
		if err := yaml.Unmarshal([]byte(out), &got); err != nil || len(got) != 72 || got[0]["name"] != "nvidia.com/gpu=0" || got[0]["spec"] != filepath.Join(dir, "nvidia.json") {
			t.Errorf("cdi list %v: %v\n%s", args, err, out)
		}
		caps := 0
		for _, d := range got {
			if d["capability"] == true {
				caps++
			}
		}
		if caps != 7 {
			t.Errorf("cdi list %v: %d devices marked capability, want 7", args, caps)
		}
	}
	// A folder without specs: the header, and a note saying where it
	// looked and how to write one (none with --quiet).
	empty := filepath.Join(t.TempDir(), "none")
	for _, quiet := range []bool{false, true} {
		args := []string{"cdi", "list", "--spec-dir", empty, "--config", writeConfig(t, "")}
		if quiet {
			args = append([]string{"--quiet"}, args...)
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin("gpuctk"), args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		want := "gpuctk: note: no CDI devices in " + empty + ": `gpuctk cdi generate --output /var/run/cdi/nvidia.yaml` writes this host's\n"
		if quiet {
			want = ""
		}
		if err != nil || stdout.String() != "DEVICE  SPEC\n" || stderr.String() != want {
			t.Errorf("cdi list of an empty folder (quiet %v): %v, stdout %q, stderr %q, want %q", quiet, err, stdout.String(), stderr.String(), want)
		}
	}
}

// TestGenerateWarmsHook: writing a spec reads the hook's file into the
// page cache (as the refresh unit does at boot, before any container), and
// a hook path that is not a file is a warning, not a failure.
func TestGenerateWarmsHook(t *testing.T) {
	// Under the module's .cache, on its disk: /tmp is a tmpfs on many
	// hosts, whose files never leave memory.
	_, file, _, _ := runtime.Caller(0)
	cache := filepath.Join(filepath.Dir(filepath.Dir(file)), ".cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(cache, "warm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	hook := filepath.Join(dir, "gpuctk-hook")
	data, err := os.ReadFile(bin("gpuctk-hook"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hook, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// Written back and dropped from the page cache, as after a reboot.
	if err := pagecache.Drop(hook); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(hook)
	if err != nil {
		t.Fatal(err)
	}
	in, all, err := pagecache.Resident(f, int64(len(data)))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if in == all {
		t.Skipf("the file system of %s keeps every page of a file in memory (a tmpfs?): nothing for generate to read in", dir)
	}
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "l40s", "--config", writeConfig(t, ""), "--hook-path", hook, "--output", filepath.Join(dir, "nvidia.yaml"))
	f, err = os.Open(hook)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if in, all, err := pagecache.Resident(f, int64(len(data))); err != nil || in != all {
		t.Errorf("after gpuctk cdi generate, %d of the hook's %d pages are in the page cache (%v)", in, all, err)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", "l40s", "--config", writeConfig(t, ""), "--hook-path", fifo, "--output", filepath.Join(dir, "fifo-hook", "nvidia.yaml"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gpuctk: warning: "+fifo+": not a regular file: not read into the page cache ahead of the first container\n") {
		t.Errorf("generate with a FIFO as hook path: %v\n%s", err, out)
	}
}

// TestSimulateLeavesHostState: runs on a simulated host make nothing in
// the real host's state folders (/run/gpuctk/mps, /run/gpuctk/runtime-
// cache): cdi generate (with MPS sharing and --output), mig apply and
// labels with --simulate; mps start --simulate without a state root of its
// own is refused in one line. Each runs in a mount namespace of its own
// with an empty tmpfs on /run, which must stay empty.
func TestSimulateLeavesHostState(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	os.WriteFile(cfg, []byte("[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 2\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "none.toml"), nil, 0o644)
	profile := simulatedProfile(t, "dgx-a100")
	gpuctk := bin("gpuctk")
	for _, tc := range []struct {
		name, cmd, want string
	}{
		{"cdi generate", gpuctk + " cdi generate --config " + cfg + " --simulate dgx-a100 --output " + filepath.Join(dir, "nvidia.yaml"), ""},
		{"mig apply", gpuctk + " mig apply --config " + filepath.Join(dir, "none.toml") + " --simulate " + profile + " -c all-balanced --output " + filepath.Join(t.TempDir(), "mig.yaml"), ""},
		{"labels", gpuctk + " labels --config " + cfg + " --simulate dgx-a100", ""},
		{"mps start", gpuctk + " mps start --config " + cfg + " --simulate dgx-a100",
			"gpuctk: --simulate with the host's own MPS state root /run/gpuctk/mps: a simulated host's daemons would pass for the real host's; give --state-root a folder of its own"},
	} {
		script := "mount -t tmpfs gpuctk-test /run || exit 99\n" + tc.cmd + " >/dev/null 2>" + filepath.Join(dir, "stderr") + "; echo \"exit $?\"; find /run -mindepth 1"
		out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, out)
		}
		stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		wantExit := "exit 0"
		if tc.want != "" {
			wantExit = "exit 1"
			if strings.TrimSpace(string(stderr)) != tc.want {
				t.Errorf("%s: stderr %q, want %q", tc.name, stderr, tc.want)
			}
		}
		if lines[0] != wantExit {
			t.Errorf("%s: %s, want %s\n%s", tc.name, lines[0], wantExit, stderr)
		}
		if len(lines) > 1 {
			t.Errorf("%s made under /run:\n%s", tc.name, strings.Join(lines[1:], "\n"))
		}
	}
}
