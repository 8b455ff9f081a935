package tests

import (
	"encoding/json"
	"fmt"
	"os/exec"
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
`, t.TempDir()))
	mpsArgs := func(sub string, extra ...string) []string {
		return append([]string{"mps", sub, "--config", cfg, "--simulate", "dgx-a100", "--driver-root", driverRoot}, extra...)
	}
	t.Cleanup(func() { runResult(t, bin("gpuctk"), mpsArgs("stop")...) })
	run(t, bin("gpuctk"), mpsArgs("start")...)
	status := func() map[string]mpsStatus {
		var st []mpsStatus
		if err := json.Unmarshal([]byte(run(t, bin("gpuctk"), mpsArgs("status", "--json")...)), &st); err != nil {
			t.Fatal(err)
		}
		out := map[string]mpsStatus{}
		for _, s := range st {
			out[s.Name] = s
		}
		return out
	}
	before := status()

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
	after := status()
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
	restarted := status()
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
