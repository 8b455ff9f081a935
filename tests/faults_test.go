package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

type mpsStatus struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	PID       int    `json:"pid"`
	Answering bool   `json:"answering"`
}

// TestMPSDaemonKilledInUse kills the daemon of a device whose replica a
// running container uses: status reports it, start restarts it, and the
// other device's daemon and the running container are left alone.
func TestMPSDaemonKilledInUse(t *testing.T) {
	driverRoot, _ := fakeDriverRoot(t, "dgx-a100")
	installMPSDouble(t, driverRoot)
	cfg := writeConfig(t, fmt.Sprintf(`
[[sharing]]
devices = ["0"]
strategy = "mps"
replicas = 2

[[sharing]]
devices = ["mig-0"]
strategy = "mps"
replicas = 2

[mps]
state-root = %q
shm-size = "16MiB"
`, shortStateRoot(t)))
	mpsArgs := func(sub string, extra ...string) []string {
		return append([]string{"mps", sub, "--config", cfg, "--simulate", "dgx-a100", "--driver-root", driverRoot}, extra...)
	}
	t.Cleanup(func() { runResult(t, bin("gpuctk"), mpsArgs("stop")...) })
	run(t, bin("gpuctk"), mpsArgs("start")...)
	// status reads `mps status --json`, which exits 3 while a daemon the
	// configuration asks for is down (want says which).
	status := func(wantExit int) map[string]mpsStatus {
		t.Helper()
		stdout, stderr, code := runResult(t, bin("gpuctk"), mpsArgs("status", "--json")...)
		if code != wantExit {
			t.Errorf("mps status exited %d, want %d: %s", code, wantExit, stderr)
		}
		var st []mpsStatus
		if err := json.Unmarshal([]byte(stdout), &st); err != nil {
			t.Fatal(err)
		}
		out := map[string]mpsStatus{}
		for _, s := range st {
			out[s.Name] = s
		}
		return out
	}
	before := status(0)

	vendor := uniqueVendor()
	spec := systemSpecPath(t, vendor)
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--driver-root", driverRoot,
		"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", cfg)
	rootfs := busyboxRoot(t, false)
	name := "gpuctk-fault-" + vendor[11:19]
	args := append(append([]string{}, podmanArgs...), "-d", "--name", name, "--device", vendor+"/gpu=0::1", "--rootfs", rootfs, "/bin/sleep", "60")
	if out, err := exec.Command("podman", args...).CombinedOutput(); err != nil {
		t.Fatalf("podman run -d: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("podman", "rm", "-f", "-t", "0", name).Run() })

	// The daemon dies while the container uses its replica.
	if err := syscall.Kill(before["0"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; mpsDaemonRuns(before["0"].PID) && i < 100; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	after := status(3)
	if after["0"].Answering || after["0"].State == "running" {
		t.Errorf("status after the kill reports GPU 0 as %+v", after["0"])
	}
	if after["mig-0"] != before["mig-0"] || !after["mig-0"].Answering {
		t.Errorf("the other device changed: %+v -> %+v", before["mig-0"], after["mig-0"])
	}
	// A new container on that device is refused with the actionable message.
	if out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=0::0"}, "true"); err == nil || !strings.Contains(out, "is not running: run `gpuctk mps start`") {
		t.Errorf("start on a dead daemon's replica: %v: %s", err, out)
	}

	out := run(t, bin("gpuctk"), mpsArgs("start")...)
	restarted := status(0)
	if !restarted["0"].Answering || restarted["0"].PID == before["0"].PID || !mpsDaemonRuns(restarted["0"].PID) {
		t.Errorf("GPU 0 after start: %+v (start printed %q)", restarted["0"], out)
	}
	if restarted["mig-0"] != before["mig-0"] || !strings.Contains(out, "already running") {
		t.Errorf("start touched the other device: %+v -> %+v (%q)", before["mig-0"], restarted["mig-0"], out)
	}
	if ps, err := exec.Command("podman", "ps", "--filter", "name="+name, "--format", "{{.Names}}").CombinedOutput(); err != nil || strings.TrimSpace(string(ps)) != name {
		t.Errorf("the container using the replica is gone: %v %s", err, ps)
	}
	if out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=0::0"}, "true"); err != nil {
		t.Errorf("start after the restart: %v: %s", err, out)
	}
}

// TestMPSStopWithoutDriver stops daemons after the driver's NVML is gone
// (the package's gpuctk-mps.service stopping on a host whose driver was
// removed): the daemons stop, with a warning that compute modes stay.
func TestMPSStopWithoutDriver(t *testing.T) {
	e := newMPSEnv(t, "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 2\n")
	run(t, bin("gpuctk"), e.args("start", "dgx-a100")...)
	pid := e.record(t, dgxGPU0).PID
	stdout, stderr, code := runResult(t, bin("gpuctk"), "mps", "stop", "--config", e.config, "--driver-root", e.driverRoot, "--state-root", e.stateRoot)
	if code != 0 || !strings.Contains(stdout, "stopped, pid") || !strings.Contains(stderr, "libnvidia-ml.so.1 not found") || !strings.Contains(stderr, "compute modes are left as they are") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, stdout, stderr)
	}
	if mpsDaemonRuns(pid) {
		t.Error("the daemon still runs")
	}
}

// TestRuntimeKilledMidCreate kills gpuctk-runtime at random moments of
// create, many times: config.json is always either the old document or the
// new one, never torn.
func TestRuntimeKilledMidCreate(t *testing.T) {
	dir := t.TempDir()
	specDir := filepath.Join(dir, "cdi")
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-h100-mig", "--config", writeConfig(t, ""),
		"--output", filepath.Join(specDir, "nvidia.yaml"))
	// The real runtime is /bin/true: a create that survives execs it harmlessly.
	cfg := writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n[runtime]\nruntimes = [\"/bin/true\"]\nlog-file = %q\ncache-dir = %q\n",
		specDir, filepath.Join(dir, "runtime.log"), filepath.Join(dir, "cache")))
	bundle := filepath.Join(dir, "bundle")
	os.MkdirAll(bundle, 0o755)
	// A large document, so the write takes long enough to be interrupted.
	env := []string{"NVIDIA_VISIBLE_DEVICES=mig-3,mig-40", "PATH=/bin"}
	for i := 0; i < 2000; i++ {
		env = append(env, fmt.Sprintf("FILLER_%d=%s", i, strings.Repeat("x", 64)))
	}
	old, _ := json.MarshalIndent(map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"},
		"process": map[string]any{"args": []string{"sh"}, "env": env, "cwd": "/"}, "linux": map[string]any{}}, "", "\t")
	configJSON := filepath.Join(bundle, "config.json")
	create := func(id string) *exec.Cmd {
		cmd := exec.Command(bin("gpuctk-runtime"), "create", "--bundle", bundle, id)
		cmd.Env = []string{"GPUCTK_CONFIG=" + cfg, "PATH=/usr/bin:/bin"}
		return cmd
	}
	// One uninterrupted create fills the runtime's device cache and tells
	// how long a create takes (the runtime caches nothing for a spec
	// changed in the last 50 ms).
	time.Sleep(100 * time.Millisecond)
	os.WriteFile(configJSON, old, 0o644)
	start := time.Now()
	if out, err := create("warm").CombinedOutput(); err != nil {
		t.Fatalf("create: %v: %s", err, out)
	}
	took := time.Since(start)
	killed, completed, rewritten := 0, 0, 0
	for i := 0; i < 150; i++ {
		if err := os.WriteFile(configJSON, old, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := create(fmt.Sprintf("c%d", i))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill at a point spread over the whole create and a bit beyond.
		time.Sleep(took * time.Duration(i%30) / 25)
		cmd.Process.Kill()
		if err := cmd.Wait(); err == nil {
			completed++
		} else {
			killed++
		}
		data, err := os.ReadFile(configJSON)
		if err != nil {
			t.Fatalf("run %d: config.json: %v", i, err)
		}
		if string(data) == string(old) {
			continue
		}
		var doc struct {
			Process struct{ Env []string } `json:"process"`
		}
		if err := json.Unmarshal(data, &doc); err != nil || !slices.Contains(doc.Process.Env, "NVIDIA_VISIBLE_DEVICES=void") {
			t.Fatalf("run %d: config.json is neither old nor new (%v):\n%.300s", i, err, data)
		}
		rewritten++
	}
	t.Logf("create takes %v; %d runs killed, %d completed; config.json rewritten %d times, old %d times", took, killed, completed, rewritten, 150-rewritten)
	if killed == 0 || rewritten == 0 || rewritten == 150 {
		t.Errorf("the kills did not land both before and after the write: %d killed, %d rewritten", killed, rewritten)
	}
}
