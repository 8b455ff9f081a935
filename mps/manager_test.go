package mps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// The integration tests drive a Manager against the test double of
// nvidia-cuda-mps-control (tests/mpsdouble). They mount tmpfs and make
// mount namespaces, so they need root, as CI has.

var (
	doubleOnce sync.Once
	doublePath string
	doubleErr  error
)

// TestMain removes the double's folder after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if doublePath != "" {
		os.RemoveAll(filepath.Dir(doublePath))
	}
	os.Exit(code)
}

// double builds tests/mpsdouble once per test run.
func double(t *testing.T) string {
	t.Helper()
	fakehost.RequireRoot(t, "tmpfs mounts, mount namespaces")
	doubleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mpsdouble-")
		if err != nil {
			doubleErr = err
			return
		}
		doublePath = filepath.Join(dir, controlName)
		_, file, _, _ := runtime.Caller(0)
		cmd := exec.Command("go", "build", "-o", doublePath, "./tests/mpsdouble")
		cmd.Dir = filepath.Dir(filepath.Dir(file))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			doubleErr = fmt.Errorf("build the MPS double: %v\n%s", err, out)
		}
	})
	if doubleErr != nil {
		t.Fatal(doubleErr)
	}
	return doublePath
}

// driverRootWith returns a driver root whose usr/bin/nvidia-cuda-mps-control
// is the double, or the given script when script is not empty.
func driverRootWith(t *testing.T, script string) string {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(root, "usr/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(bin, controlName)
	if script != "" {
		if err := os.WriteFile(dst, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return root
	}
	data, err := os.ReadFile(double(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// fakeModes is a ComputeModer that records what is done to each GPU.
type fakeModes struct {
	mu    sync.Mutex
	modes map[string]int
	calls []string
}

func newFakeModes() *fakeModes { return &fakeModes{modes: map[string]int{}} }

func (f *fakeModes) ComputeMode(uuid string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "get "+uuid)
	return f.modes[uuid], nil
}

func (f *fakeModes) SetComputeMode(uuid string, mode int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("set %s %s", uuid, ComputeModeName(mode)))
	f.modes[uuid] = mode
	return nil
}

func (f *fakeModes) mode(uuid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.modes[uuid]
}

// record is what the double writes to mpsdouble.json.
type record struct {
	PID                    int               `json:"pid"`
	CUDAVisibleDevices     string            `json:"cudaVisibleDevices"`
	Env                    []string          `json:"env"`
	ShmDev                 uint64            `json:"shmDev"`
	ActiveThreadPercentage float64           `json:"activeThreadPercentage"`
	PinnedMemLimits        map[string]string `json:"pinnedMemLimits"`
	Commands               []string          `json:"commands"`
}

func readRecord(t *testing.T, stateRoot, uuid string) record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(stateRoot, uuid, "log", "mpsdouble.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func countPrefix(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func alive(pid int) bool {
	return pid > 0 && isControl(pid, "")
}

// shortTempDir returns a new folder short enough for a daemon's sockets
// under it (t.TempDir's are named after the test, and long).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newManager returns a Manager on a fresh state root whose daemons are
// stopped when the test ends.
func newManager(t *testing.T, driverRoot string, opts ...Option) (*Manager, string) {
	t.Helper()
	fakehost.RequireRoot(t, "tmpfs mounts, mount namespaces")
	state := shortTempDir(t)
	m := New(append([]Option{WithDriverRoot(driverRoot), WithStateRoot(state), WithShmSize(64 << 20), WithTimeout(10 * time.Second)}, opts...)...)
	t.Cleanup(func() {
		// t.Context is cancelled before cleanups run.
		if _, err := m.Stop(context.Background(), nil); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(mounts), state) {
			t.Errorf("mounts left under %s", state)
		}
	})
	return m, state
}

func TestManagerLifecycle(t *testing.T) {
	root := driverRootWith(t, "")
	modes := newFakeModes()
	m, state := newManager(t, root, WithComputeModer(modes))
	t.Setenv("GPUCTK_MUST_NOT_LEAK", "1")

	devs := dgxDevices(t, state,
		config.Sharing{Devices: []string{"0"}, Strategy: config.MPS, Replicas: 4, ActiveThreadPercentage: 25, PinnedMemoryLimit: 20 << 30},
		config.Sharing{Devices: []string{"1"}, Strategy: config.TimeSlicing, Replicas: 4},
		config.Sharing{Devices: []string{"7:0"}, Strategy: config.MPS, Replicas: 2},
	)
	gpu0, mig := devs[0], devs[1]
	gpu7 := mig.GPU.UUID

	// Start: a daemon per MPS-shared device, nothing for time-slicing.
	res, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Action != "started" || res[1].Action != "started" || res[0].Device.UUID() != gpu0.UUID() || res[1].Device.UUID() != mig.UUID() {
		t.Fatalf("start = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(state, "GPU-a7542f20-14de-9809-577c-4528b760814b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("time-sliced GPU 1 got MPS state: %v", err)
	}
	var hostShm syscall.Stat_t
	if err := syscall.Stat("/dev/shm", &hostShm); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d       *offer.Share
		r       Result
		percent float64
		limit   string
	}{{gpu0, res[0], 25, "20480M"}, {mig, res[1], 50, "9984M"}} {
		rec := readRecord(t, state, tc.d.UUID())
		if rec.PID != tc.r.PID || !alive(rec.PID) {
			t.Errorf("%s: result pid %d, daemon pid %d", tc.d, tc.r.PID, rec.PID)
		}
		// The defaults, set on the daemon.
		if rec.ActiveThreadPercentage != tc.percent || rec.PinnedMemLimits["0"] != tc.limit || len(rec.PinnedMemLimits) != 1 {
			t.Errorf("%s: daemon defaults %v%%, %v; want %v%%, 0=%s", tc.d, rec.ActiveThreadPercentage, rec.PinnedMemLimits, tc.percent, tc.limit)
		}
		// An environment built from scratch, naming the device.
		wantEnv := []string{
			"PATH=" + strings.Join([]string{root + "/usr/bin", root + "/usr/sbin", root + "/bin", root + "/sbin", root + "/usr/local/bin", root + "/usr/local/nvidia/bin"}, ":") + ":/usr/sbin:/usr/bin:/sbin:/bin",
			"CUDA_MPS_PIPE_DIRECTORY=" + tc.d.PipeDir(),
			"CUDA_MPS_LOG_DIRECTORY=" + tc.d.LogDir(),
			"CUDA_VISIBLE_DEVICES=" + tc.d.UUID(),
			"LD_LIBRARY_PATH=" + filepath.Join(tc.d.Dir, "driver-lib"), // the driver's libraries alone
			"PWD=/", // os/exec's, for the working folder
		}
		if !slices.Equal(rec.Env, wantEnv) || rec.CUDAVisibleDevices != tc.d.UUID() {
			t.Errorf("%s: daemon env\n%q\nwant\n%q", tc.d, rec.Env, wantEnv)
		}
		// Its /dev/shm is the device's tmpfs, not the host's.
		shm := tc.d.ShmDir()
		var st syscall.Stat_t
		var fs syscall.Statfs_t
		if err := syscall.Stat(shm, &st); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Statfs(shm, &fs); err != nil {
			t.Fatal(err)
		}
		if !isMountPoint(shm) || fs.Type != 0x01021994 || uint64(fs.Blocks)*uint64(fs.Bsize) != 64<<20 {
			t.Errorf("%s: %s is not a 64MiB tmpfs: mounted %v, type %#x, %d bytes", tc.d, shm, isMountPoint(shm), fs.Type, uint64(fs.Blocks)*uint64(fs.Bsize))
		}
		if rec.ShmDev != st.Dev || rec.ShmDev == hostShm.Dev {
			t.Errorf("%s: daemon /dev/shm is device %d, want the tmpfs's %d (the host's is %d)", tc.d, rec.ShmDev, st.Dev, hostShm.Dev)
		}
		if data, err := os.ReadFile(filepath.Join(shm, "mpsdouble")); err != nil || strings.TrimSpace(string(data)) != tc.d.UUID() {
			t.Errorf("%s: marker in the tmpfs: %q, %v", tc.d, data, err)
		}
		if log, err := os.ReadFile(filepath.Join(tc.d.LogDir(), "control.log")); err != nil || !strings.Contains(string(log), "Startup, CUDA_VISIBLE_DEVICES="+tc.d.UUID()) {
			t.Errorf("%s: control.log: %q, %v", tc.d, log, err)
		}
		// The socket answers, as the hook checks it.
		c, err := net.Dial("unixpacket", filepath.Join(tc.d.PipeDir(), "control"))
		if err != nil {
			t.Errorf("%s: control socket: %v", tc.d, err)
		} else {
			c.Close()
		}
	}
	if _, err := os.Stat("/dev/shm/mpsdouble"); err == nil {
		t.Error("a daemon wrote to the host's /dev/shm")
	}
	// Both GPUs are in EXCLUSIVE_PROCESS; their old mode is kept.
	if modes.mode(gpu0.UUID()) != ComputeModeExclusiveProcess || modes.mode(gpu7) != ComputeModeExclusiveProcess {
		t.Errorf("compute modes after start: %v", modes.calls)
	}
	for _, gpu := range []string{gpu0.UUID(), gpu7} {
		if data, err := os.ReadFile(filepath.Join(state, "compute-mode", gpu)); err != nil || string(data) != "0\n" {
			t.Errorf("saved compute mode of %s: %q, %v", gpu, data, err)
		}
	}

	// Status: both answer.
	st, err := m.Status(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || !st[0].Answering || !st[1].Answering || st[0].PID != res[0].PID || st[1].PID != res[1].PID ||
		!st[0].ShmMounted || !st[0].Configured || st[0].PipeDir != gpu0.PipeDir() {
		t.Errorf("status = %+v", st)
	}

	// A second start leaves the running daemons alone.
	before := readRecord(t, state, gpu0.UUID())
	calls := len(modes.calls)
	res2, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res2) != 2 || res2[0].Action != "already running" || res2[0].PID != res[0].PID || res2[1].PID != res[1].PID {
		t.Errorf("second start = %+v", res2)
	}
	after := readRecord(t, state, gpu0.UUID())
	if countPrefix(after.Commands, "set_") != countPrefix(before.Commands, "set_") || len(modes.calls) != calls {
		t.Errorf("second start changed the daemon: commands %q -> %q, compute mode calls %v", before.Commands, after.Commands, modes.calls[calls:])
	}

	// Stop: quit, gone, unmounted, compute mode restored.
	res3, err := m.Stop(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res3) != 2 || res3[0].Action != "stopped" || res3[1].Action != "stopped" {
		t.Errorf("stop = %+v", res3)
	}
	for i, d := range []*offer.Share{gpu0, mig} {
		if alive(res[i].PID) {
			t.Errorf("%s: daemon %d still runs", d, res[i].PID)
		}
		if rec := readRecord(t, state, d.UUID()); rec.Commands[len(rec.Commands)-1] != "quit" {
			t.Errorf("%s: last command %q, want quit", d, rec.Commands[len(rec.Commands)-1])
		}
		if isMountPoint(d.ShmDir()) {
			t.Errorf("%s: tmpfs still mounted", d)
		}
		if entries, _ := os.ReadDir(d.PipeDir()); len(entries) != 0 {
			t.Errorf("%s: pipe dir still holds %v", d, entries)
		}
		if _, err := os.Stat(filepath.Join(state, d.UUID(), "device.json")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: record left: %v", d, err)
		}
	}
	if modes.mode(gpu0.UUID()) != ComputeModeDefault || modes.mode(gpu7) != ComputeModeDefault {
		t.Errorf("compute modes after stop: %v", modes.calls)
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "compute-mode")); len(entries) != 0 {
		t.Errorf("saved compute modes left: %v", entries)
	}

	// Stopping again is fine; status says not running.
	res4, err := m.Stop(t.Context(), devs)
	if err != nil || len(res4) != 2 || res4[0].Action != "not running" {
		t.Errorf("second stop = %+v, %v", res4, err)
	}
	st, err = m.Status(t.Context(), devs)
	if err != nil || len(st) != 2 || st[0].Answering || st[0].PID != 0 || st[0].ShmMounted {
		t.Errorf("status after stop = %+v, %v", st, err)
	}
}

func TestManagerDeadDaemon(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
	res, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	// A daemon killed outright leaves its socket and pid file behind.
	if err := syscall.Kill(res[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; alive(res[0].PID) && i < 100; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(devs[0].PipeDir(), "control")); err != nil {
		t.Fatalf("the killed daemon's socket is gone: %v", err)
	}
	st, err := m.Status(t.Context(), devs)
	if err != nil || st[0].Answering || st[0].PID != 0 {
		t.Fatalf("status of a killed daemon = %+v, %v", st, err)
	}
	// Start replaces it.
	res2, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if res2[0].Action != "started" || !alive(res2[0].PID) || res2[0].PID == res[0].PID {
		t.Fatalf("restart = %+v", res2)
	}
}

func TestManagerLeftover(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"mig-0"}, Strategy: config.MPS, Replicas: 2})
	res, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	// The configuration no longer shares it: status and stop still see it.
	st, err := m.Status(t.Context(), nil)
	if err != nil || len(st) != 1 || st[0].Configured || !st[0].Answering || st[0].Device.UUID() != devs[0].UUID() {
		t.Fatalf("status = %+v, %v", st, err)
	}
	res2, err := m.Stop(t.Context(), nil)
	if err != nil || len(res2) != 1 || res2[0].Action != "stopped" || alive(res[0].PID) {
		t.Fatalf("stop = %+v, %v", res2, err)
	}
	if st, err := m.Status(t.Context(), nil); err != nil || len(st) != 0 {
		t.Fatalf("status after stop = %+v, %v", st, err)
	}
}

func TestManagerNeverAnswers(t *testing.T) {
	// -d succeeds but no daemon ever answers.
	root := driverRootWith(t, "#!/bin/sh\n[ \"$1\" = -d ] && exit 0\necho 'Cannot find MPS control daemon process' >&2\nexit 1\n")
	modes := newFakeModes()
	m, state := newManager(t, root, WithComputeModer(modes), WithTimeout(500*time.Millisecond))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"3"}, Strategy: config.MPS, Replicas: 2})
	start := time.Now()
	_, err := m.Start(t.Context(), devs)
	want := "MPS device GPU 3 (GPU-62dcf677-cc5f-d6b0-7fe5-3a9f7a23bd87): its daemon did not answer get_default_active_thread_percentage within 500ms: see " +
		filepath.Join(devs[0].LogDir(), "control.log")
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("start took %s", d)
	}
	// Nothing is left half-done.
	if isMountPoint(devs[0].ShmDir()) {
		t.Error("tmpfs left mounted")
	}
	if modes.mode(devs[0].UUID()) != ComputeModeDefault || len(modes.calls) != 3 {
		t.Errorf("compute mode calls %v, want get, set EXCLUSIVE_PROCESS, set DEFAULT", modes.calls)
	}
	if _, err := os.Stat(filepath.Join(state, devs[0].UUID(), "device.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record left: %v", err)
	}
}

func TestManagerDaemonFails(t *testing.T) {
	root := driverRootWith(t, "#!/bin/sh\necho 'cannot open /dev/nvidiactl' >&2\nexit 3\n")
	m, state := newManager(t, root)
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0"}, Strategy: config.MPS, Replicas: 2})
	_, err := m.Start(t.Context(), devs)
	want := "MPS device GPU 0 (GPU-13fe3248-4da8-65f8-e972-3f15eef51793): " + filepath.Join(root, "usr/bin", controlName) + " -d: exit status 3: cannot open /dev/nvidiactl"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	if isMountPoint(devs[0].ShmDir()) {
		t.Error("tmpfs left mounted")
	}
}

func TestComputeModeSharedGPU(t *testing.T) {
	modes := newFakeModes()
	state := shortTempDir(t)
	m := New(WithStateRoot(state), WithComputeModer(modes))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"4:0", "4:1"}, Strategy: config.MPS, Replicas: 2},
		config.Sharing{Devices: []string{"0"}, Strategy: config.MPS, Replicas: 2})
	gpu4 := devs[1].GPU.UUID
	modes.modes[gpu4] = 2 // PROHIBITED, to see it restored
	modes.modes[devs[0].UUID()] = ComputeModeExclusiveProcess
	writeRecord := func(d *offer.Share) {
		os.MkdirAll(filepath.Join(state, d.UUID()), 0o755)
		data, _ := json.Marshal(d)
		os.WriteFile(m.recordPath(d.UUID()), data, 0o644)
	}
	for _, d := range devs {
		if err := m.holdComputeMode(d); err != nil {
			t.Fatal(err)
		}
		writeRecord(d)
	}
	if modes.mode(gpu4) != ComputeModeExclusiveProcess {
		t.Fatalf("GPU 4 mode %d", modes.mode(gpu4))
	}
	// The first MIG device stops: GPU 4 still serves the second.
	os.Remove(m.recordPath(devs[1].UUID()))
	if err := m.releaseComputeMode(devs[1]); err != nil {
		t.Fatal(err)
	}
	if modes.mode(gpu4) != ComputeModeExclusiveProcess {
		t.Fatalf("GPU 4 restored while a daemon runs on it")
	}
	os.Remove(m.recordPath(devs[2].UUID()))
	if err := m.releaseComputeMode(devs[2]); err != nil {
		t.Fatal(err)
	}
	if modes.mode(gpu4) != 2 {
		t.Fatalf("GPU 4 mode %d after its last daemon, want 2 (PROHIBITED)", modes.mode(gpu4))
	}
	// GPU 0 was EXCLUSIVE_PROCESS before: nothing saved, nothing restored.
	os.Remove(m.recordPath(devs[0].UUID()))
	if err := m.releaseComputeMode(devs[0]); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"get " + devs[0].UUID(),
		"get " + gpu4,
		"set " + gpu4 + " EXCLUSIVE_PROCESS",
		"set " + gpu4 + " EXCLUSIVE_PROCESS",
		"set " + gpu4 + " PROHIBITED",
	}
	if !slices.Equal(modes.calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", modes.calls, want)
	}
}

func TestManagerKillsHungDaemon(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""), WithTimeout(500*time.Millisecond))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"3"}, Strategy: config.MPS, Replicas: 2})
	res, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(devs[0].LogDir(), "mpsdouble.ignore-quit"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res2, err := m.Stop(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res2) != 1 || res2[0].Action != "killed" || res2[0].PID != res[0].PID || alive(res[0].PID) {
		t.Fatalf("stop = %+v (daemon alive: %v)", res2, alive(res[0].PID))
	}
	if isMountPoint(devs[0].ShmDir()) {
		t.Error("tmpfs left mounted")
	}
}

// failingModes fails SetComputeMode while fail is set, as NVML does when
// the GPU is busy or lost.
type failingModes struct {
	*fakeModes
	fail bool
}

func (f *failingModes) SetComputeMode(uuid string, mode int) error {
	if f.fail {
		return errors.New("NVML: Unknown Error")
	}
	return f.fakeModes.SetComputeMode(uuid, mode)
}

// TestStopRestoresLeftComputeMode: found in review. A stop whose compute
// mode restore failed, or a start killed between saving the GPU's mode
// and writing its daemon record, left the GPU in EXCLUSIVE_PROCESS with
// its saved mode, and every later `gpuctk mps stop` said "no MPS daemon
// started by gpuctk to stop" and left it there: one process at a time on
// that GPU, for good.
func TestStopRestoresLeftComputeMode(t *testing.T) {
	modes := &failingModes{fakeModes: newFakeModes()}
	m, state := newManager(t, driverRootWith(t, ""), WithComputeModer(modes))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0"}, Strategy: config.MPS, Replicas: 2},
		config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
	gpu0, gpu2 := devs[0].UUID(), devs[1].UUID()
	if _, err := m.Start(t.Context(), devs[:1]); err != nil {
		t.Fatal(err)
	}
	// The restore fails.
	modes.fail = true
	if _, err := m.Stop(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "restore compute mode") {
		t.Fatalf("stop with NVML failing: %v", err)
	}
	modes.fail = false
	// A start killed after saving GPU 2's mode, before its record.
	if err := m.holdComputeMode(devs[1]); err != nil {
		t.Fatal(err)
	}
	if modes.mode(gpu0) != ComputeModeExclusiveProcess || modes.mode(gpu2) != ComputeModeExclusiveProcess {
		t.Fatalf("modes %v", modes.calls)
	}
	if _, err := m.Stop(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	for _, gpu := range []string{gpu0, gpu2} {
		if modes.mode(gpu) != ComputeModeDefault {
			t.Errorf("GPU %s left in %s after stop; calls %v", gpu, ComputeModeName(modes.mode(gpu)), modes.calls)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(state, "compute-mode")); len(entries) != 0 {
		t.Errorf("saved compute modes left: %v", entries)
	}
}

// TestStartStatusChangedSettings: found in review. After the
// configuration changed a running device's active thread percentage or
// pinned memory limit, `gpuctk mps start` said "already running ... (50%
// threads ...)" and `gpuctk mps status` showed 50%, the configuration's,
// while the daemon kept the 25% it was started with: nothing told the
// user to stop and start it.
func TestStartStatusChangedSettings(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""))
	old := dgxDevices(t, state, config.Sharing{Devices: []string{"0"}, Strategy: config.MPS, Replicas: 4, ActiveThreadPercentage: 25, PinnedMemoryLimit: 20 << 30})
	res, err := m.Start(t.Context(), old)
	if err != nil {
		t.Fatal(err)
	}
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0"}, Strategy: config.MPS, Replicas: 4, ActiveThreadPercentage: 50, PinnedMemoryLimit: 20 << 30})
	res2, err := m.Start(t.Context(), devs)
	want := "MPS device GPU 0 (GPU-13fe3248-4da8-65f8-e972-3f15eef51793): its daemon (pid " + fmt.Sprint(res[0].PID) +
		") runs with 25% threads and 20480M pinned memory, not the configuration's 50% and 20480M: run `gpuctk mps stop`, then start again"
	if err == nil || err.Error() != want {
		t.Errorf("start with new settings = %+v, %v\nwant error %s", res2, err, want)
	}
	if !alive(res[0].PID) {
		t.Errorf("the running daemon was stopped")
	}
	st, err := m.Status(t.Context(), devs)
	if err != nil || len(st) != 1 || !st[0].Answering || !st[0].Outdated {
		t.Errorf("status = %+v, %v; want the daemon answering, outdated", st, err)
	}
	if st, err := m.Status(t.Context(), old); err != nil || len(st) != 1 || st[0].Outdated {
		t.Errorf("status with the daemon's own settings = %+v, %v", st, err)
	}
}

// dyingModes ends the goroutine that sets a compute mode, as the death
// of a `gpuctk mps start` at that step would: deferred calls run (the
// lock is let go, as the kernel lets go of a dead process's flock), and
// nothing after it.
type dyingModes struct{ *fakeModes }

func (d dyingModes) SetComputeMode(uuid string, mode int) error {
	runtime.Goexit()
	return nil
}

// TestStartKilledMidway: found in review. `gpuctk mps start` mounted the
// device's tmpfs and pipe folder before it wrote the record stop finds
// devices by: a start killed in between left both mounted, and every
// later stop said "no MPS daemon started by gpuctk to stop".
func TestStartKilledMidway(t *testing.T) {
	root := driverRootWith(t, "")
	_, state := newManager(t, root) // its cleanup stops and checks for mounts left
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"1"}, Strategy: config.MPS, Replicas: 2})
	dying := New(WithDriverRoot(root), WithStateRoot(state), WithShmSize(64<<20), WithComputeModer(dyingModes{newFakeModes()}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		dying.Start(context.Background(), devs)
		t.Error("Start returned: the compute mode double did not end it")
	}()
	<-done
	if !isMountPoint(devs[0].ShmDir()) {
		t.Fatal("the start did not get as far as the mounts: the test no longer tests what it says")
	}
	// A later stop, from another process, undoes it.
	res, err := New(WithDriverRoot(root), WithStateRoot(state)).Stop(t.Context(), nil)
	if err != nil || len(res) != 1 || res[0].Device.UUID() != devs[0].UUID() || res[0].Action != "not running" {
		t.Fatalf("stop after a start killed midway = %+v, %v", res, err)
	}
	if isMountPoint(devs[0].ShmDir()) || isMountPoint(devs[0].PipeDir()) {
		t.Error("mounts left after stop")
	}
}

// TestBrokenRecord: found in review. One device.json that could not be
// decoded (a disk error, an edit by hand) made every `gpuctk mps status`
// and `gpuctk mps stop` fail before looking at any device: the other
// daemons could be neither seen nor stopped.
func TestBrokenRecord(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0", "2"}, Strategy: config.MPS, Replicas: 2})
	res, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(state, devs[1].UUID(), "device.json")
	good, err := os.ReadFile(broken)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, []byte(`{"gpu": {"uuid": `), 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr := "MPS state " + broken + " cannot be read (unexpected end of JSON input): its daemon, if one runs, is left alone and compute modes are not restored; " +
		"stop that daemon by hand, remove " + filepath.Dir(broken) + ", then run `gpuctk mps stop` again"

	st, err := m.Status(t.Context(), nil)
	if err == nil || err.Error() != wantErr {
		t.Errorf("status error = %v\nwant %s", err, wantErr)
	}
	if len(st) != 1 || st[0].Device.UUID() != devs[0].UUID() || !st[0].Answering {
		t.Errorf("status = %+v: want the other device, answering", st)
	}
	stopped, err := m.Stop(t.Context(), nil)
	if err == nil || err.Error() != wantErr {
		t.Errorf("stop error = %v\nwant %s", err, wantErr)
	}
	if len(stopped) != 1 || stopped[0].Device.UUID() != devs[0].UUID() || stopped[0].Action != "stopped" || alive(res[0].PID) {
		t.Errorf("stop = %+v: want the other device stopped", stopped)
	}
	if !alive(res[1].PID) {
		t.Error("the broken record's daemon was stopped: nothing says it is that device's")
	}
	// A record that decodes but names no device: reported the same, not
	// a crash asking a missing GPU for its UUID.
	if err := os.WriteFile(broken, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantEmpty := "MPS state " + broken + " cannot be read (it is not the record of device " + devs[1].UUID() + ")"
	if _, err := m.Status(t.Context(), nil); err == nil || !strings.HasPrefix(err.Error(), wantEmpty) {
		t.Errorf("status with a record of {}: %v\nwant it to start %s", err, wantEmpty)
	}
	// Mended, it is stopped as any other (newManager's cleanup checks).
	if err := os.WriteFile(broken, good, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLockBounded: found in review. Start and stop waited for the state
// root's lock with no bound: behind a `gpuctk mps stop` hung on an
// unmount, every later start and stop hung too, saying nothing.
func TestLockBounded(t *testing.T) {
	root := driverRootWith(t, "")
	m, state := newManager(t, root, WithTimeout(50*time.Millisecond))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0"}, Strategy: config.MPS, Replicas: 2})
	// Another command holds it (an open file of its own: flocks of two
	// opens conflict, in one process as in two).
	holder, err := os.OpenFile(filepath.Join(state, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = m.Start(t.Context(), devs)
	want := fmt.Sprintf("MPS state: pid %d (", os.Getpid())
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "has held "+filepath.Join(state, ".lock")+" for over 1.5s") {
		t.Errorf("start behind a held lock: %v\nwant it to start with %q and name the lock and the wait", err, want)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("start waited %v", d)
	}
	if _, err := m.Stop(t.Context(), nil); err == nil {
		t.Error("stop behind a held lock did not fail")
	}
	holder.Close()
	patient := New(WithDriverRoot(root), WithStateRoot(state), WithShmSize(64<<20), WithTimeout(10*time.Second))
	if _, err := patient.Start(t.Context(), devs); err != nil {
		t.Errorf("start once the lock is let go: %v", err)
	}
}

// TestLockWaitInterrupted: found in review. The wait for another's lock
// did not look at the context: `gpuctk mps run` given SIGTERM or SIGINT
// while another start or stop held the lock went on waiting for the
// whole of lockWait (five minutes by default), and its stop after that
// as long again, past any pod's grace period.
func TestLockWaitInterrupted(t *testing.T) {
	// A lockWait of 6s: long enough to tell an interrupted wait from one
	// that ran out.
	m, state := newManager(t, driverRootWith(t, ""), WithTimeout(200*time.Millisecond))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0"}, Strategy: config.MPS, Replicas: 2})
	holder, err := os.OpenFile(filepath.Join(state, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, op := range []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"start", func(ctx context.Context) error { _, err := m.Start(ctx, devs); return err }},
		{"stop", func(ctx context.Context) error { _, err := m.Stop(ctx, nil); return err }},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		err := op.do(ctx)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s went on waiting %v for the lock after its context ended", op.name, d)
		}
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted while waiting for "+filepath.Join(state, ".lock")) {
			t.Errorf("%s interrupted while waiting for the lock: %v", op.name, err)
		}
		cancel()
	}
	holder.Close()
}
