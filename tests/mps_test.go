package tests

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The MPS tests drive `gpuctk mps` against the test double of
// nvidia-cuda-mps-control (tests/mpsdouble), installed into a fake driver
// root.

var (
	mpsDoubleOnce sync.Once
	mpsDoubleBin  string
	mpsDoubleErr  error
)

// mpsDriverRoot returns a driver root with the double installed as
// usr/bin/nvidia-cuda-mps-control.
func mpsDriverRoot(t *testing.T) string {
	t.Helper()
	mpsDoubleOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		mpsDoubleBin = filepath.Join(binDir, "mpsdouble")
		cmd := exec.Command("go", "build", "-o", mpsDoubleBin, "./tests/mpsdouble")
		cmd.Dir = filepath.Dir(filepath.Dir(file))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			mpsDoubleErr = fmt.Errorf("build the MPS double: %v\n%s", err, out)
		}
	})
	if mpsDoubleErr != nil {
		t.Fatal(mpsDoubleErr)
	}
	root := t.TempDir()
	data, err := os.ReadFile(mpsDoubleBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/nvidia-cuda-mps-control"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// mpsDaemonRuns reports whether pid is a live control daemon (a zombie
// waiting for init to reap it has quit).
func mpsDaemonRuns(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || !strings.HasPrefix(string(comm), "nvidia-cuda-mps") {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(stat, ')')
	return err == nil && i > 0 && len(stat) > i+2 && stat[i+2] != 'Z'
}

// runResult runs a command and returns its stdout, stderr and exit code.
func runResult(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("%s %v: %v", name, args, err)
	return "", "", 0
}

// mpsEnv is a configuration, driver root and state root for `gpuctk mps`.
type mpsEnv struct {
	config, driverRoot, stateRoot string
}

// shortStateRoot returns a new MPS state root: a daemon's socket paths
// must fit in 107 bytes, and t.TempDir's folders carry the test's name.
func shortStateRoot(t *testing.T) string {
	t.Helper()
	state, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	return state
}

func newMPSEnv(t *testing.T, configText string) *mpsEnv {
	t.Helper()
	e := &mpsEnv{driverRoot: mpsDriverRoot(t), stateRoot: shortStateRoot(t)}
	e.config = filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(e.config, []byte(configText), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Stop whatever a failed test left running, before the temp
		// folders go.
		runResult(t, bin("gpuctk"), e.args("stop", "dgx-a100")...)
	})
	return e
}

func (e *mpsEnv) args(sub, simulate string, extra ...string) []string {
	return append([]string{"mps", sub, "--config", e.config, "--simulate", simulate,
		"--driver-root", e.driverRoot, "--state-root", e.stateRoot}, extra...)
}

// mpsRecord is what the double writes to mpsdouble.json.
type mpsRecord struct {
	PID                    int               `json:"pid"`
	CUDAVisibleDevices     string            `json:"cudaVisibleDevices"`
	ActiveThreadPercentage float64           `json:"activeThreadPercentage"`
	PinnedMemLimits        map[string]string `json:"pinnedMemLimits"`
	Commands               []string          `json:"commands"`
}

func (e *mpsEnv) record(t *testing.T, uuid string) mpsRecord {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.stateRoot, uuid, "log", "mpsdouble.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r mpsRecord
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

const (
	dgxGPU0 = "GPU-13fe3248-4da8-65f8-e972-3f15eef51793"
	dgxMIG  = "MIG-e725a1d6-821a-631f-4190-9a9fdbd7b22a" // 7:0, 3g.20gb, mig-12
)

const mpsConfig = `
[[sharing]]
devices = ["0"]
strategy = "mps"
replicas = 4
active-thread-percentage = 25
pinned-memory-limit = "20GiB"

[[sharing]]
devices = ["7:0"]
strategy = "mps"
replicas = 2

[mps]
shm-size = "64MiB"
`

func TestMPSStartStatusStop(t *testing.T) {
	e := newMPSEnv(t, mpsConfig)
	gpuctk := bin("gpuctk")

	out := run(t, gpuctk, e.args("start", "dgx-a100")...)
	gpu0 := e.record(t, dgxGPU0)
	mig := e.record(t, dgxMIG)
	want := fmt.Sprintf("GPU 0 (%s): started, pid %d (4 replicas, 25%% threads, 20480M pinned memory each)\n"+
		"MIG device 7:0 (%s): started, pid %d (2 replicas, 50%% threads, 9984M pinned memory each)\n", dgxGPU0, gpu0.PID, dgxMIG, mig.PID)
	if out != want {
		t.Errorf("start printed\n%s\nwant\n%s", out, want)
	}
	// The double got its device and the defaults.
	if gpu0.CUDAVisibleDevices != dgxGPU0 || gpu0.ActiveThreadPercentage != 25 || gpu0.PinnedMemLimits["0"] != "20480M" {
		t.Errorf("GPU 0 daemon: %+v", gpu0)
	}
	if mig.CUDAVisibleDevices != dgxMIG || mig.ActiveThreadPercentage != 50 || mig.PinnedMemLimits["0"] != "9984M" {
		t.Errorf("MIG daemon: %+v", mig)
	}

	var st []struct {
		Name                   string `json:"name"`
		UUID                   string `json:"uuid"`
		MIG                    *int   `json:"mig"`
		State                  string `json:"state"`
		PID                    int    `json:"pid"`
		PipeDir                string `json:"pipeDir"`
		Answering              bool   `json:"answering"`
		ShmMounted             bool   `json:"shmMounted"`
		Replicas               int    `json:"replicas"`
		ActiveThreadPercentage int    `json:"activeThreadPercentage"`
		PinnedMemoryLimitMiB   uint64 `json:"pinnedMemoryLimitMiB"`
	}
	if err := json.Unmarshal([]byte(run(t, gpuctk, e.args("status", "dgx-a100", "--json")...)), &st); err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].Name != "0" || st[0].State != "running" || st[0].PID != gpu0.PID || !st[0].Answering || !st[0].ShmMounted ||
		st[0].PipeDir != filepath.Join(e.stateRoot, dgxGPU0, "pipe") || st[0].Replicas != 4 || st[0].ActiveThreadPercentage != 25 || st[0].PinnedMemoryLimitMiB != 20480 ||
		st[1].Name != "mig-12" || st[1].MIG == nil || *st[1].MIG != 0 || st[1].State != "running" || st[1].PID != mig.PID {
		t.Errorf("status --json = %+v", st)
	}
	table := run(t, gpuctk, e.args("status", "dgx-a100")...)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "DEVICE") || !strings.Contains(lines[1], fmt.Sprintf("running  %d", gpu0.PID)) ||
		!strings.HasPrefix(lines[2], "mig-12 (7:0)") {
		t.Errorf("status table:\n%s", table)
	}

	// Start again: the daemons are left alone.
	out = run(t, gpuctk, e.args("start", "dgx-a100")...)
	if !strings.Contains(out, fmt.Sprintf("GPU 0 (%s): already running, pid %d", dgxGPU0, gpu0.PID)) || strings.Contains(out, "started") {
		t.Errorf("second start printed\n%s", out)
	}

	out = run(t, gpuctk, e.args("stop", "dgx-a100")...)
	want = fmt.Sprintf("GPU 0 (%s): stopped, pid %d\nMIG device 7:0 (%s): stopped, pid %d\n", dgxGPU0, gpu0.PID, dgxMIG, mig.PID)
	if out != want {
		t.Errorf("stop printed\n%s\nwant\n%s", out, want)
	}
	if r := e.record(t, dgxGPU0); r.Commands[len(r.Commands)-1] != "quit" {
		t.Errorf("GPU 0 daemon's last command %q", r.Commands[len(r.Commands)-1])
	}
	if mpsDaemonRuns(gpu0.PID) || mpsDaemonRuns(mig.PID) {
		t.Errorf("a daemon still runs")
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), e.stateRoot) {
		t.Errorf("mounts left under %s", e.stateRoot)
	}
	// Down: the table, and exit status 3 with what to do, as an init
	// script's status says "not running".
	table, stderr, code := runResult(t, gpuctk, e.args("status", "dgx-a100")...)
	if strings.Count(table, "not running") != 2 || code != 3 ||
		stderr != "gpuctk: 2 of the 2 MPS daemons the configuration asks for are not running: start them with `gpuctk mps start`\n" {
		t.Errorf("status after stop: exit %d, stderr %q\n%s", code, stderr, table)
	}
	_, stderr, code = runResult(t, gpuctk, e.args("stop", "dgx-a100")...)
	if code != 0 || stderr != "no MPS daemon started by gpuctk to stop\n" {
		t.Errorf("second stop: exit %d, stderr %q", code, stderr)
	}
}

// longStateRoot puts a control socket's path past the 107 bytes a unix
// socket address holds.
const longStateRoot = "/run/gpuctk-test/a-state-root-long-enough-for-the-socket-path-to-overflow"

func TestMPSBadInput(t *testing.T) {
	entry := func(devices string, replicas int, extra string) string {
		return fmt.Sprintf("[[sharing]]\ndevices = [%s]\nstrategy = \"mps\"\nreplicas = %d\n%s", devices, replicas, extra)
	}
	for _, tc := range []struct {
		name, simulate, config string
		args                   []string
		want                   string // stderr, after "gpuctk: ", with %s for the config file
	}{
		{"too many replicas", "dgx-a100", entry(`"0"`, 49, ""), nil,
			"config %s: [[sharing]] entry 1: MPS device GPU 0 (" + dgxGPU0 + "): replicas is 49: at most 48 (the most clients an MPS server takes)"},
		{"too many replicas before Volta", "p100", entry(`"1"`, 17, ""), nil,
			"config %s: [[sharing]] entry 1: MPS device GPU 1 (GPU-d276b9c1-f0b2-3546-4b07-f27d72113be5): replicas is 17: at most 16 (the most clients an MPS server takes on a GPU older than Volta)"},
		{"too many replicas on a small MIG instance", "dgx-a100", entry(`"4:0"`, 15, ""), nil,
			"config %s: [[sharing]] entry 1: MPS device MIG device 4:0 (MIG-4f372b7b-fd65-b445-a712-a1601122affe): replicas is 15: at most 14 (one client per SM of this MIG instance, which has 14)"},
		{"memory limit above device memory", "dgx-a100", entry(`"0"`, 2, "pinned-memory-limit = \"41GiB\"\n"), nil,
			"config %s: [[sharing]] entry 1: MPS device GPU 0 (" + dgxGPU0 + "): pinned-memory-limit is 41984MiB: the device has only 40960MiB"},
		{"thread percentage", "dgx-a100", entry(`"0"`, 2, "active-thread-percentage = 101\n"), nil,
			`config %s: [[sharing]] entry 1: "active-thread-percentage" is 101: it must be from 1 to 100`},
		{"one replica", "dgx-a100", entry(`"0"`, 1, ""), nil,
			`config %s: [[sharing]] entry 1: "replicas" is 1: a shared device needs at least 2 replicas`},
		{"selector matches nothing", "dgx-a100", entry(`"9"`, 2, ""), nil,
			`config %s: [[sharing]] entry 1: selector "9" matches no device on this host`},
		{"binary missing", "dgx-a100", entry(`"0"`, 2, ""), []string{"--driver-root", "/nonexistent"},
			"driver root /nonexistent: nvidia-cuda-mps-control is not in /usr/bin, /usr/sbin, /bin, /sbin, /usr/local/bin, /usr/local/nvidia/bin: install the driver's MPS binaries or pass the right --driver-root"},
		{"state root too long for the control socket", "dgx-a100", entry(`"0"`, 2, ""), []string{"--state-root", longStateRoot},
			"config %s: [[sharing]] entry 1: MPS device GPU 0 (" + dgxGPU0 + "): its control socket " + longStateRoot + "/" + dgxGPU0 +
				"/pipe/control_privileged is 138 bytes long, over the 107 a unix socket allows: choose a shorter [mps] state-root"},
		{"unknown simulated host", "nosuch", entry(`"0"`, 2, ""), nil,
			`simulated host "nosuch" is not known: use one of a30, dgx-a100, dgx-h100-mig, h100, h200, l40s, p100, or a profile file path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMPSEnv(t, tc.config)
			stdout, stderr, code := runResult(t, bin("gpuctk"), e.args("start", tc.simulate, tc.args...)...)
			want := "gpuctk: " + tc.want + "\n"
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, e.config)
			}
			if code == 0 || stderr != want || stdout != "" {
				t.Errorf("exit %d, stdout %q\nstderr %q\nwant   %q", code, stdout, stderr, want)
			}
			if entries, _ := os.ReadDir(e.stateRoot); len(entries) != 0 {
				t.Errorf("state root holds %v after a refused start", entries)
			}
		})
	}
}

// installMPSDouble puts the double in a driver root as its
// nvidia-cuda-mps-control.
func installMPSDouble(t *testing.T, driverRoot string) {
	t.Helper()
	src := filepath.Join(mpsDriverRoot(t), "usr/bin/nvidia-cuda-mps-control")
	copyFile(t, src, filepath.Join(driverRoot, "usr/bin/nvidia-cuda-mps-control"), 0o755)
}

// insideMPS prints what a container sees of its MPS client set-up.
const insideMPS = `env | grep ^CUDA_MPS_ | sort; ` +
	`test -S /tmp/nvidia-mps/control && echo SOCKET; ` +
	`echo MARKER=$(cat /dev/shm/mpsdouble); ` +
	`echo SHMDEV=$(stat -c %d /dev/shm); ` +
	`echo hello > /dev/shm/from-container && echo WROTE; true`

func TestPodmanMPS(t *testing.T) {
	driverRoot, _ := fakeDriverRoot(t, "dgx-a100")
	installMPSDouble(t, driverRoot)
	state := shortStateRoot(t)
	// Replicas get every name, so a client asking by UUID or G:M finds
	// its daemon too.
	cfg := writeConfig(t, fmt.Sprintf(`
[cdi]
replica-names = ["index", "uuid", "gpu:mig"]

[[sharing]]
devices = ["0"]
strategy = "mps"
replicas = 4
active-thread-percentage = 25
pinned-memory-limit = "20GiB"

[[sharing]]
devices = ["mig-0"]
strategy = "mps"
replicas = 2

[mps]
state-root = %q
shm-size = "64MiB"
`, state))
	mpsArgs := func(sub string) []string {
		return []string{"mps", sub, "--config", cfg, "--simulate", "dgx-a100", "--driver-root", driverRoot}
	}
	t.Cleanup(func() { runResult(t, bin("gpuctk"), mpsArgs("stop")...) })
	run(t, bin("gpuctk"), mpsArgs("start")...)

	vendor := uniqueVendor()
	spec := systemSpecPath(t, vendor)
	out := run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--driver-root", driverRoot,
		"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", cfg)
	// 4 x 2 + 2 x 3 replica names, 3 x 2 whole GPU names, 4 x 2 names of
	// GPUs in MIG mode, 15 x 3 MIG device names and "all".
	if want := "8 GPUs, 16 MIG devices, 6 replicas, 74 device names\n"; !strings.HasSuffix(out, want) {
		t.Errorf("generate said %q, want it to end %q", out, want)
	}
	rootfs := busyboxRoot(t, false)

	const mig0 = "MIG-4f372b7b-fd65-b445-a712-a1601122affe" // GPU 4's MIG device 0, 1g.5gb, 4864MiB
	for _, tc := range []struct {
		device, uuid, percent, limit string
	}{
		{"0::1", dgxGPU0, "25", "20480M"},
		{"mig-0::0", mig0, "50", "2432M"},
		{dgxGPU0 + "::3", dgxGPU0, "25", "20480M"},
		{"4:0::1", mig0, "50", "2432M"},
		{mig0 + "::1", mig0, "50", "2432M"},
	} {
		t.Run(tc.device, func(t *testing.T) {
			shm := filepath.Join(state, tc.uuid, "shm")
			os.Remove(filepath.Join(shm, "from-container"))
			out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=" + tc.device}, insideMPS)
			if err != nil {
				t.Fatalf("podman: %v\n%s", err, out)
			}
			t.Logf("inside:\n%s", out)
			var st syscall.Stat_t
			if err := syscall.Stat(shm, &st); err != nil {
				t.Fatal(err)
			}
			want := []string{
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + tc.percent,
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=" + tc.limit,
				"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
				// The daemon's pipe, and /dev/shm is the daemon's tmpfs:
				// the file the daemon keeps there, the same file system,
				// and what the container writes reaches the daemon's side.
				"SOCKET",
				"MARKER=" + tc.uuid,
				fmt.Sprintf("SHMDEV=%d", st.Dev),
				"WROTE",
			}
			if got := lines(out); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("inside the container:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if data, err := os.ReadFile(filepath.Join(shm, "from-container")); err != nil || string(data) != "hello\n" {
				t.Errorf("the container's /dev/shm write is not in the daemon's tmpfs: %q, %v", data, err)
			}
		})
	}

	// The double got the defaults, so a client that drops its env still
	// gets at most its share.
	e := &mpsEnv{stateRoot: state}
	if r := e.record(t, dgxGPU0); r.ActiveThreadPercentage != 25 || r.PinnedMemLimits["0"] != "20480M" || r.CUDAVisibleDevices != dgxGPU0 {
		t.Errorf("GPU 0 daemon: %+v", r)
	}
	if r := e.record(t, mig0); r.ActiveThreadPercentage != 50 || r.PinnedMemLimits["0"] != "2432M" || r.CUDAVisibleDevices != mig0 {
		t.Errorf("mig-0 daemon: %+v", r)
	}

	// Replicas of two devices in one container: each binds its daemon's
	// pipe folder at /tmp/nvidia-mps, so a client would reach one daemon
	// only. The hook refuses the container and says why.
	out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=0::0", "--device", vendor + "/gpu=mig-0::1"}, "true")
	want := "the container is given MPS replicas of 2 devices"
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "give a container MPS replicas of one device only") {
		t.Errorf("podman with replicas of two MPS devices: %v\n%s\nwant the output to hold %q", err, out, want)
	}

	// With the daemon stopped, the hook refuses the container and says why.
	run(t, bin("gpuctk"), mpsArgs("stop")...)
	out, err = podman(t, rootfs, []string{"--device", vendor + "/gpu=0::1"}, "true")
	want = "MPS daemon for " + dgxGPU0 + " is not running: run `gpuctk mps start` or start gpuctk-mps.service"
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("podman with the daemon stopped: %v\n%s\nwant the output to hold %q", err, out, want)
	}
	// A time-sliced or whole device does not depend on any daemon.
	out, err = podman(t, rootfs, []string{"--device", vendor + "/gpu=1"}, "grep -q /tmp/nvidia-mps /proc/self/mountinfo && echo MPS; env | grep CUDA_MPS; true")
	if err != nil || strings.Contains(out, "MPS") {
		t.Errorf("GPU 1 with MPS daemons stopped: %v\n%s", err, out)
	}
}

func TestMPSGenerateRefusesBadSharing(t *testing.T) {
	cfg := writeConfig(t, "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 49\n")
	out := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(out, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runResult(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--config", cfg, "--output", out)
	if code == 0 || !strings.Contains(stderr, "MPS device GPU 0 ("+dgxGPU0+"): replicas is 49: at most 48") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if data, _ := os.ReadFile(out); string(data) != "old\n" {
		t.Errorf("the spec file changed: %q", data)
	}
}

// TestMPSNeverStarted asks for an MPS replica on a fresh boot: no daemon
// ever ran, so its folders were never made. The container is refused with
// gpuctk's own line naming the daemon and `gpuctk mps start`, not the
// low-level runtime's "stat ... no such file or directory" on a mount,
// through CDI alone (podman) and through gpuctk-runtime alike.
func TestMPSNeverStarted(t *testing.T) {
	tmp, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	state := filepath.Join(tmp, "state") // never made by a daemon
	h := newRuntimeHost(t, fmt.Sprintf("\n[mps]\nstate-root = %q\n\n[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 2\n", state))
	wrapper := h.runtimeWrapper(t)
	want := "MPS daemon for " + dgxGPU0 + " is not running: run `gpuctk mps start` or start gpuctk-mps.service"
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"CDI", []string{"--device", h.vendor + "/gpu=0::1"}},
		{"gpuctk-runtime", []string{"--runtime", wrapper, "-e", "NVIDIA_VISIBLE_DEVICES=0::1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := podman(t, h.rootfs, tc.flags, "true")
			if err == nil || !strings.Contains(out, want) || strings.Contains(out, "no such file or directory") {
				t.Errorf("podman: %v\n%s\nwant the container refused with %q", err, out, want)
			}
		})
	}
}

// TestMPSDriverRootGlibc: under a driver root other than / (the device
// plugin's image, with the host at /driver-root), the daemon runs with
// the loader of the system gpuctk runs on, and must not load the driver
// root's glibc, which does not match it. The double is built dynamically
// here, and the driver root's libc.so.6 is junk, so a daemon that looked
// in the driver root's library folders would not start ("invalid ELF
// header"); the driver's own libraries it must still find.
func TestMPSDriverRootGlibc(t *testing.T) {
	e := newMPSEnv(t, "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 2\n")
	double := filepath.Join(t.TempDir(), "mpsdouble")
	build := exec.Command("go", "build", "-o", double, "./tests/mpsdouble")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=1") // net through cgo: linked against glibc
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the MPS double with cgo: %v\n%s", err, out)
	}
	if f, err := elf.Open(double); err != nil {
		t.Fatal(err)
	} else {
		dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
		f.Close()
		if !dynamic {
			t.Fatalf("the double built with CGO_ENABLED=1 is static: the test needs one that loads glibc")
		}
	}
	copyFile(t, double, filepath.Join(e.driverRoot, "usr/bin/nvidia-cuda-mps-control"), 0o755)
	for _, dir := range []string{"usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib64", "lib64"} {
		p := filepath.Join(e.driverRoot, dir, "libc.so.6")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("the driver root's glibc, which the loader must not take\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	libcuda := filepath.Join(e.driverRoot, "usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06")
	if err := os.WriteFile(libcuda, []byte("libcuda"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("libcuda.so.580.65.06", filepath.Join(filepath.Dir(libcuda), "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := runResult(t, bin("gpuctk"), e.args("start", "dgx-a100")...)
	if code != 0 || !strings.Contains(out, "started") {
		t.Fatalf("mps start with a driver root holding another glibc: exit %d\n%s%s", code, out, stderr)
	}
	data, err := os.ReadFile(filepath.Join(e.stateRoot, dgxGPU0, "log", "mpsdouble.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Env []string `json:"env"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	var libPath string
	for _, v := range rec.Env {
		if s, ok := strings.CutPrefix(v, "LD_LIBRARY_PATH="); ok {
			libPath = s
		}
	}
	found := false
	for _, dir := range filepath.SplitList(libPath) {
		if _, err := os.Stat(filepath.Join(dir, "libc.so.6")); err == nil {
			t.Errorf("the daemon's LD_LIBRARY_PATH %s holds a libc.so.6 (%s)", libPath, dir)
		}
		if got, err := os.ReadFile(filepath.Join(dir, "libcuda.so.1")); err == nil && string(got) == "libcuda" {
			found = true
		}
	}
	if !found {
		t.Errorf("the daemon's LD_LIBRARY_PATH %q does not lead to the driver root's libcuda.so.1", libPath)
	}
	if st := run(t, bin("gpuctk"), e.args("status", "dgx-a100")...); !strings.Contains(st, "running") {
		t.Errorf("status after start:\n%s", st)
	}
	run(t, bin("gpuctk"), e.args("stop", "dgx-a100")...)
}

// TestMPSRunOneDeviceFails: `gpuctk mps run` is the mps component's main
// process. When one device's daemon cannot start, the others that did
// must go on running, as `mps start` leaves them: were run to exit, the
// container would end, and its runtime kills every process left in its
// cgroup (the daemons included, without quit, their compute modes and
// mounts left behind), then restarts the pod to fail the same way, over
// and over, so no MPS device of the node would stay usable.
func TestMPSRunOneDeviceFails(t *testing.T) {
	e := newMPSEnv(t, mpsConfig)
	// The MIG device's pipe folder is a file: its start fails, GPU 0's not.
	if err := os.MkdirAll(filepath.Join(e.stateRoot, dgxMIG), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.stateRoot, dgxMIG, "pipe"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin("gpuctk"), e.args("run", "dgx-a100")...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	running := func() bool {
		out, _, _ := runResult(t, bin("gpuctk"), e.args("status", "dgx-a100", "--json")...)
		type device struct {
			UUID  string `json:"uuid"`
			State string `json:"state"`
		}
		var st []device
		json.Unmarshal([]byte(out), &st)
		return slices.ContainsFunc(st, func(d device) bool { return d.UUID == dgxGPU0 && d.State == "running" })
	}
	deadline := time.Now().Add(20 * time.Second)
	for !running() {
		if time.Now().After(deadline) {
			t.Fatalf("GPU 0's daemon never ran")
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-exited:
		t.Fatalf("mps run exited (%v) with GPU 0's daemon running: in a pod, the runtime then kills that daemon too\n%s", waitErr, out.String())
	case <-time.After(time.Second):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-exited
	if waitErr != nil {
		t.Errorf("mps run after SIGTERM: %v\n%s", waitErr, out.String())
	}
	got := out.String()
	if !strings.Contains(got, "MPS device MIG device 7:0 ("+dgxMIG+"): ") || !strings.Contains(got, "GPU 0 ("+dgxGPU0+"): stopped") {
		t.Errorf("mps run printed\n%s\nwant the MIG device's error and GPU 0 stopped", got)
	}
	if running() {
		t.Errorf("GPU 0's daemon still runs after SIGTERM")
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), e.stateRoot) {
		t.Errorf("mounts left under %s", e.stateRoot)
	}
}

// TestMPSRunTermDuringStart: found in review. SIGTERM while `gpuctk mps
// run` was starting daemons did not interrupt the start: each device that
// did not answer was waited on for its whole start-timeout, one after the
// other, before stopping began, so a pod deleted then took devices ×
// start-timeout and was SIGKILLed at its grace period half-way, leaving
// daemons, mounts and compute modes behind.
func TestMPSRunTermDuringStart(t *testing.T) {
	e := newMPSEnv(t, mpsConfig+"start-timeout = \"5s\"\n")
	// -d succeeds but no daemon ever answers.
	script := "#!/bin/sh\n[ \"$1\" = -d ] && exit 0\necho 'Cannot find MPS control daemon process' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(e.driverRoot, "usr/bin/nvidia-cuda-mps-control"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin("gpuctk"), e.args("run", "dgx-a100")...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	// The first device's start is under way once its record is written.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(e.stateRoot, dgxGPU0, "device.json")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPU 0's start never began\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("mps run still runs 15s after SIGTERM\n%s", out.String())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("mps run took %s to exit after SIGTERM during start (start-timeout 5s)\n%s", d.Round(100*time.Millisecond), out.String())
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), e.stateRoot) {
		t.Errorf("mounts left under %s", e.stateRoot)
	}
	for _, uuid := range []string{dgxGPU0, dgxMIG} {
		if _, err := os.Stat(filepath.Join(e.stateRoot, uuid, "device.json")); err == nil {
			t.Errorf("%s: daemon record left", uuid)
		}
	}
}

// TestMPSHealsLostSocket: a tenant running as root removes its device's
// MPS control socket. Under `gpuctk mps run` (the DaemonSet, and
// gpuctk-mps.service) the daemon is restarted within 10 s, with one line
// saying what was found, and the other device's daemon is left alone;
// `gpuctk mps start` restarts such a device itself. Before, the device's
// other tenants were locked out until an administrator ran stop and start.
func TestMPSHealsLostSocket(t *testing.T) {
	e := newMPSEnv(t, mpsConfig)
	gpuctk := bin("gpuctk")
	var out lockedBuffer
	cmd := exec.Command(gpuctk, e.args("run", "dgx-a100")...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	pids := func() map[string]int {
		stdout, _, _ := runResult(t, gpuctk, e.args("status", "dgx-a100", "--json")...)
		var st []struct {
			UUID  string `json:"uuid"`
			State string `json:"state"`
			PID   int    `json:"pid"`
		}
		json.Unmarshal([]byte(stdout), &st)
		m := map[string]int{}
		for _, s := range st {
			if s.State == "running" {
				m[s.UUID] = s.PID
			}
		}
		return m
	}
	waitRunning := func(what string, ok func(map[string]int) bool, within time.Duration) map[string]int {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if p := pids(); ok(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s\n%s", what, within, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	before := waitRunning("both daemons running", func(p map[string]int) bool { return len(p) == 2 }, 20*time.Second)
	sock := filepath.Join(e.stateRoot, dgxGPU0, "pipe", "control")
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	after := waitRunning("GPU 0's daemon restarted", func(p map[string]int) bool {
		return p[dgxGPU0] != 0 && p[dgxGPU0] != before[dgxGPU0]
	}, 10*time.Second)
	t.Logf("restarted %s after the socket was removed", time.Since(removed).Round(10*time.Millisecond))
	if after[dgxMIG] != before[dgxMIG] {
		t.Errorf("the MIG device's daemon changed: %d, then %d", before[dgxMIG], after[dgxMIG])
	}
	want := fmt.Sprintf("GPU 0 (%s): restarted: its daemon (pid %d) lost its control socket %s, pid %d (4 replicas, 25%% threads, 20480M pinned memory each)\n",
		dgxGPU0, before[dgxGPU0], sock, after[dgxGPU0])
	// The line comes once the new daemon is configured, after status
	// may see it.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), want) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if got := out.String(); strings.Count(got, "restarted") != 1 || !strings.Contains(got, want) {
		t.Errorf("mps run printed\n%s\nwant one line\n%s", got, want)
	}
	if mpsDaemonRuns(before[dgxGPU0]) {
		t.Errorf("the old daemon %d still runs", before[dgxGPU0])
	}

	// Without mps run: start restarts it itself.
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	run(t, gpuctk, e.args("start", "dgx-a100")...)
	started := pids()
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runResult(t, gpuctk, e.args("start", "dgx-a100")...)
	now := pids()
	if code != 0 || now[dgxGPU0] == 0 || now[dgxGPU0] == started[dgxGPU0] || now[dgxMIG] != started[dgxMIG] ||
		!strings.Contains(stdout, fmt.Sprintf("GPU 0 (%s): restarted: its daemon (pid %d) lost its control socket %s", dgxGPU0, started[dgxGPU0], sock)) {
		t.Errorf("start after the socket was removed: exit %d, pids %v then %v\n%s%s", code, started, now, stdout, stderr)
	}
}
