package k8s

import (
	"bytes"
	"encoding/json"
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

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// repoRoot is the project's root, two folders up from this file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// build builds the project's commands into dir.
func build(t *testing.T, dir string, cgo bool, pkgs ...string) {
	t.Helper()
	for _, p := range pkgs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, filepath.Base(p)), "./"+p)
		cmd.Dir = repoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+map[bool]string{true: "1", false: "0"}[cgo])
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", p, err, out)
		}
	}
}

func waitFor(t *testing.T, d time.Duration, what string, died <-chan struct{}, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
		select {
		case <-died:
			t.Fatalf("waiting for %s: a process the test started exited", what)
		default:
		}
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
}

func fileContains(path, s string) func() bool {
	return func() bool {
		b, _ := os.ReadFile(path)
		return bytes.Contains(b, []byte(s))
	}
}

// syncBuffer is an output buffer the test reads while a process writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// node is a kubelet and containerd in private namespaces with the plugin
// running on the host.
type node struct {
	work                    string
	plugin                  *exec.Cmd
	pluginDied, harnessDied <-chan struct{}
	pluginLog, harnessLog   syncBuffer
}

// inspect prints what a container sees of its devices, then DONE.
const inspect = `ls -1 /dev/nvidia[0-9]* /dev/nvidia-caps/* /dev/dri/card* /dev/dri/renderD* 2>/dev/null | sort; ` +
	`echo VISIBLE=$NVIDIA_VISIBLE_DEVICES; env | grep ^CUDA_MPS_ | sort; ` +
	`test -f /usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.1 && echo VDPAU; ` +
	`readlink -f /usr/lib/x86_64-linux-gnu/libcuda.so.1 | grep -q '^/usr/lib/gpuctk/core/' && echo DRIVER-FOLDER; ` +
	`test -S /tmp/nvidia-mps/control && echo MPS-SOCKET; echo DONE`

// pod starts a static pod whose container asks for n of resource.
func (n *node) pod(t *testing.T, name, resource string, count int) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: c
    image: gpuctk.test/busybox:1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", %q]
    resources:
      limits:
        %s: %d
`, name, inspect, resource, count)
	// Dotfiles are ignored: write, then rename, so the kubelet never
	// parses half a pod.
	dir := filepath.Join(n.work, "manifests")
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name+".yaml")); err != nil {
		t.Fatal(err)
	}
}

// output waits for a pod's container to print DONE and returns its lines.
func (n *node) output(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	waitFor(t, 60*time.Second, "pod "+name+" to finish", nil, func() bool {
		logs, _ := filepath.Glob(filepath.Join(n.work, "log/pods", "default_"+name+"-*", "c", "0.log"))
		if len(logs) == 0 {
			return false
		}
		data, _ := os.ReadFile(logs[0])
		out = nil
		for _, l := range strings.Split(string(data), "\n") {
			// CRI format: TIME STREAM TAG line.
			if f := strings.SplitN(l, " ", 4); len(f) == 4 {
				out = append(out, f[3])
			}
		}
		return slices.Contains(out, "DONE")
	})
	return out[:len(out)-1]
}

// pods returns the kubelet's PodList, read from its read-only port in
// the private network namespace.
func (n *node) pods(t *testing.T) string {
	t.Helper()
	pid, err := os.ReadFile(filepath.Join(n.work, "ns.pid"))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("nsenter", "-t", strings.TrimSpace(string(pid)), "-m", "-n",
		"busybox", "wget", "-qO-", "http://127.0.0.1:10255/pods").CombinedOutput()
	return string(out)
}

// podReady reports whether the kubelet has the static pod NAME-<node> Ready.
func (n *node) podReady(t *testing.T, name string) bool {
	t.Helper()
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(n.pods(t)), &list); err != nil {
		return false
	}
	for _, p := range list.Items {
		if !strings.HasPrefix(p.Metadata.Name, name+"-") {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				return true
			}
		}
	}
	return false
}

// prepare checks the prerequisites and builds the binaries the tests run:
// it returns the tools folder and the binaries' folder.
func prepare(t *testing.T) (tools, bin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs containerd and a kubelet in private namespaces (make test runs it as root)")
	}
	tools = filepath.Join(repoRoot(), ".cache/tools")
	for _, b := range []string{"kubelet", "containerd", "containerd-1.7", "ctr", "containerd-shim-runc-v2", "containerd-1.7-shim/containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(tools, b)); err != nil {
			t.Fatalf("%s is not in %s: run make deps (mk/k8s.mk and mk/runtime.mk build it)", b, tools)
		}
	}
	bin = t.TempDir()
	build(t, bin, false, "cmd/gpuctk-hook", "tests/mpsdouble")
	// Both may load NVML (go-nvml needs cgo).
	build(t, bin, true, "cmd/gpuctk", "cmd/gpuctk-device-plugin")
	return tools, bin
}

// fakeDriver returns a dgx-a100 driver root, a full 580 install (graphics,
// video, ... and the GPUs' DRM nodes), with the MPS double installed.
func fakeDriver(t *testing.T, bin string) string {
	t.Helper()
	profile, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	driverRoot := filepath.Join(t.TempDir(), "driver")
	if err := fakehost.BuildFull(driverRoot, profile); err != nil {
		t.Fatal(err)
	}
	double, err := os.ReadFile(filepath.Join(bin, "mpsdouble"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(driverRoot, "usr/bin/nvidia-cuda-mps-control"), double, 0o755); err != nil {
		t.Fatal(err)
	}
	return driverRoot
}

// startHarness starts a kubelet and containerd in private namespaces
// (env reaches run-standalone.sh: another containerd, more images, kubelet
// flags) and waits until the kubelet serves.
func startHarness(t *testing.T, tools string, env []string) *node {
	t.Helper()
	n := &node{work: t.TempDir()}
	harness := exec.Command(filepath.Join(repoRoot(), "tests/k8s/harness/run-standalone.sh"), n.work, tools)
	harness.Env = append(os.Environ(), env...)
	harness.Stdout, harness.Stderr = &n.harnessLog, &n.harnessLog
	// The test binary dying tears the namespaces down.
	harness.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	n.harnessDied = start(t, harness, "run-standalone.sh", &n.harnessLog)
	waitFor(t, 120*time.Second, "the kubelet", n.harnessDied, func() bool {
		_, err := os.Stat(filepath.Join(n.work, "ready"))
		return err == nil
	})
	t.Cleanup(func() {
		if t.Failed() {
			// Before the harness's teardown (cleanups run last first).
			for _, f := range []string{"kubelet.log", "containerd.log"} {
				data, _ := os.ReadFile(filepath.Join(n.work, f))
				lines := strings.Split(string(data), "\n")
				t.Logf("last lines of %s:\n%s", f, strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
			// What the device manager did (registrations, its clients of
			// the plugin's sockets, ListAndWatch, admission) and the pods'
			// status: a resource that stays unallocatable says why here.
			data, _ := os.ReadFile(filepath.Join(n.work, "kubelet.log"))
			var dm []string
			for l := range strings.Lines(string(data)) {
				if strings.Contains(l, "devicemanager") || strings.Contains(l, "device plugin") || strings.Contains(l, "ListAndWatch") || strings.Contains(l, "Admit") {
					dm = append(dm, strings.TrimRight(l, "\n"))
				}
			}
			t.Logf("kubelet.log, device manager lines (last 40 of %d):\n%s", len(dm), strings.Join(dm[max(0, len(dm)-40):], "\n"))
			t.Logf("pods:\n%s", n.pods(t))
		}
	})
	return n
}

// waitResources waits until the kubelet has the resources' devices: a pod
// asking for a resource not yet advertised runs without it.
func (n *node) waitResources(t *testing.T, d time.Duration, died <-chan struct{}, resources []string) {
	t.Helper()
	checkpoint := filepath.Join(n.work, "kubelet/device-plugins/kubelet_internal_checkpoint")
	for _, r := range resources {
		waitFor(t, d, r+" in the kubelet's checkpoint", died, fileContains(checkpoint, `"`+r+`":[`))
	}
}

// startNode starts a kubelet and containerd (harnessEnv picks another
// containerd), then the plugin on the host, and waits until the kubelet
// has the resources' devices.
func startNode(t *testing.T, tools, bin string, host, harnessEnv, resources []string) *node {
	t.Helper()
	n := startHarness(t, tools, harnessEnv)
	n.plugin = exec.Command(filepath.Join(bin, "gpuctk-device-plugin"), host...)
	n.plugin.Env = append(os.Environ(), "GPUCTK_KUBELET_DIR="+filepath.Join(n.work, "kubelet/device-plugins"),
		"GPUCTK_CDI_DIR="+filepath.Join(n.work, "cdi"))
	n.plugin.Stdout, n.plugin.Stderr = &n.pluginLog, &n.pluginLog
	n.pluginDied = start(t, n.plugin, "gpuctk-device-plugin", &n.pluginLog)
	n.waitResources(t, 30*time.Second, n.pluginDied, resources)
	return n
}

func writeFile(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubelet: pods asking for a whole GPU, a MIG device, a time-sliced
// and an MPS replica each see their device; an over-request fails; a new
// pod gets a device after a kubelet restart; SIGTERM stops the plugin.
func TestKubelet(t *testing.T) {
	tools, bin := prepare(t)
	driverRoot := fakeDriver(t, bin)
	cfg := writeFile(t, fmt.Sprintf(`
[cdi]
hook-path = %q

[kubernetes]
mig-strategy = "mixed"
rename-shared = true
driver-capabilities = ["compute", "utility", "video"]

[[sharing]]
devices = ["1"]
strategy = "time-slicing"
replicas = 4
fail-requests-greater-than-one = true

[[sharing]]
devices = ["2"]
strategy = "mps"
replicas = 2
resource = "nvidia.com/gpu-mps"

[mps]
state-root = %q
`, filepath.Join(bin, "gpuctk-hook"), t.TempDir()))
	host := []string{"--config", cfg, "--simulate", "dgx-a100", "--driver-root", driverRoot}
	mps := func(sub string) ([]byte, error) {
		return exec.Command(filepath.Join(bin, "gpuctk"), append([]string{"mps", sub}, host...)...).CombinedOutput()
	}
	if out, err := mps("start"); err != nil {
		t.Fatalf("gpuctk mps start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := mps("stop"); err != nil {
			t.Errorf("gpuctk mps stop: %v\n%s", err, out)
		}
	})

	resources := []string{"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/gpu-mps", "nvidia.com/mig-1g.5gb"}
	n := startNode(t, tools, bin, host, nil, resources)
	plugin, pluginDied, harnessDied := n.plugin, n.pluginDied, n.harnessDied

	ctl := []string{}
	for _, tc := range []struct {
		name, resource string
		want           []string
	}{
		// driver-capabilities adds capability-video (VDPAU) to every pod;
		// a whole GPU and its replicas bring their DRM nodes, a MIG device
		// none. The plugin's spec mounts the driver folder (a fake root
		// it can write), whose libcuda the hook links into place.
		{"gpu", "nvidia.com/gpu", []string{"/dev/dri/card1", "/dev/dri/renderD128", "/dev/nvidia0", "VISIBLE=void", "VDPAU", "DRIVER-FOLDER"}},
		{"mig", "nvidia.com/mig-1g.5gb", []string{"/dev/nvidia-caps/nvidia-cap606", "/dev/nvidia-caps/nvidia-cap607", "/dev/nvidia4", "VISIBLE=void", "VDPAU", "DRIVER-FOLDER"}},
		{"shared", "nvidia.com/gpu.shared", []string{"/dev/dri/card2", "/dev/dri/renderD129", "/dev/nvidia1", "VISIBLE=void", "VDPAU", "DRIVER-FOLDER"}},
		{"mps", "nvidia.com/gpu-mps", []string{"/dev/dri/card3", "/dev/dri/renderD130", "/dev/nvidia2", "VISIBLE=void", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "MPS-SOCKET", "VDPAU", "DRIVER-FOLDER"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.pod(t, tc.name, tc.resource, 1)
			got := n.output(t, tc.name)
			for _, w := range append(ctl, tc.want...) {
				if !slices.Contains(got, w) {
					t.Errorf("pod asking for %s: no line %q in\n%s", tc.resource, w, strings.Join(got, "\n"))
				}
			}
			for _, l := range got {
				if (strings.HasPrefix(l, "/dev/nvidia") || strings.HasPrefix(l, "/dev/dri/")) && !slices.Contains(tc.want, l) {
					t.Errorf("pod asking for %s sees %s too", tc.resource, l)
				}
			}
		})
	}

	t.Run("over-request", func(t *testing.T) {
		// Two replicas of a resource whose entry fails requests > 1,
		// with three free: the kubelet asks the plugin, which refuses.
		n.pod(t, "over", "nvidia.com/gpu.shared", 2)
		waitFor(t, 30*time.Second, "the over-request to fail", nil, func() bool {
			return strings.Contains(n.pods(t), "UnexpectedAdmissionError")
		})
		if !strings.Contains(n.pods(t), "fail-requests-greater-than-one") {
			t.Errorf("pod status does not name the rule:\n%s", n.pods(t))
		}
	})

	t.Run("kubelet restart", func(t *testing.T) {
		restarted := time.Now()
		os.Remove(filepath.Join(n.work, "ready"))
		if err := os.WriteFile(filepath.Join(n.work, "restart-kubelet"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the kubelet to restart", harnessDied, func() bool {
			_, err := os.Stat(filepath.Join(n.work, "restart-kubelet"))
			return err != nil
		})
		waitFor(t, 60*time.Second, "the plugin to register again", pluginDied, func() bool {
			return strings.Count(n.pluginLog.String(), "msg=registered") >= 2*len(resources)
		})
		// Registered is not yet listed: the restarted kubelet knows the
		// devices once the plugin's first ListAndWatch answer reaches it,
		// which it records in its checkpoint. A pod admitted before that
		// (a loaded machine) would be refused the device. The checkpoint
		// lists every resource of the old one from the start, with no
		// devices (`"nvidia.com/gpu":[]`) until that answer.
		checkpoint := filepath.Join(n.work, "kubelet/device-plugins/kubelet_internal_checkpoint")
		waitFor(t, 60*time.Second, "the restarted kubelet to list nvidia.com/gpu's devices", pluginDied, func() bool {
			fi, err := os.Stat(checkpoint)
			data, _ := os.ReadFile(checkpoint)
			return err == nil && fi.ModTime().After(restarted) && strings.Contains(string(data), `"nvidia.com/gpu":["`)
		})
		n.pod(t, "after-restart", "nvidia.com/gpu", 1)
		if got := n.output(t, "after-restart"); !slices.Contains(got, "/dev/nvidia0") && !slices.Contains(got, "/dev/nvidia3") {
			t.Errorf("pod after the kubelet restart got no GPU:\n%s", strings.Join(got, "\n"))
		}
	})

	t.Run("SIGTERM", func(t *testing.T) {
		plugin.Process.Signal(syscall.SIGTERM)
		select {
		case <-pluginDied:
		case <-time.After(10 * time.Second):
			t.Fatal("the plugin did not exit on SIGTERM")
		}
		if code := plugin.ProcessState.ExitCode(); code != 0 {
			t.Errorf("the plugin exited %d on SIGTERM", code)
		}
		if left, _ := filepath.Glob(filepath.Join(n.work, "kubelet/device-plugins/gpuctk-*")); len(left) > 0 {
			t.Errorf("sockets left after SIGTERM: %v", left)
		}
	})
}

// start starts cmd, stops it with SIGTERM when the test ends, and returns
// a channel closed when it exits; on failure the test logs its output.
func start(t *testing.T, cmd *exec.Cmd, name string, log *syncBuffer) <-chan struct{} {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop on SIGTERM", name)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, log.String())
		}
	})
	return done
}

// TestKubeletContainerd17: containerd 1.7 (CDI switched on) gets the
// devices through cdi.k8s.io/ annotations.
//
// The plugin also runs as from its image: --hook-dir puts the hook it
// carries where the spec calls it (the pod's hook runs from there), and
// --labels-dir writes the node's labels as an NFD feature file.
func TestKubeletContainerd17(t *testing.T) {
	tools, bin := prepare(t)
	driverRoot := fakeDriver(t, bin)
	cfg := writeFile(t, `
[kubernetes]
mig-strategy = "mixed"
device-list-strategy = ["cdi-annotations"]
driver-capabilities = ["video"]
`)
	hookDir, labelsDir := filepath.Join(t.TempDir(), "bin"), filepath.Join(t.TempDir(), "features.d")
	host := []string{"--config", cfg, "--simulate", "dgx-a100", "--driver-root", driverRoot, "--hook-dir", hookDir, "--labels-dir", labelsDir}
	// 1.7 has CDI off: configure turns it on, as the README tells an
	// operator to, reading the harness's spec folder (@WORK@ is filled in
	// by the harness, in the configured file too).
	containerdConfig := filepath.Join(t.TempDir(), "config.toml.in")
	tmpl, err := os.ReadFile(filepath.Join(repoRoot(), "tests/k8s/harness/containerd-1.7-config.toml.in"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(containerdConfig, tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	configure := exec.Command(filepath.Join(bin, "gpuctk"), "runtime", "configure", "--runtime", "containerd", "--cdi", "--cdi-spec-dirs", "@WORK@/cdi",
		"--config", containerdConfig, "--drop-in", filepath.Join(filepath.Dir(containerdConfig), "conf.d", "99-gpuctk.toml"), "--runtime-path", "/usr/bin/gpuctk-runtime")
	if out, err := configure.CombinedOutput(); err != nil {
		t.Fatalf("gpuctk runtime configure --cdi: %v\n%s", err, out)
	}
	if data, _ := os.ReadFile(containerdConfig); !strings.Contains(string(data), "enable_cdi = true") {
		t.Fatalf("gpuctk runtime configure --cdi did not turn CDI on:\n%s", data)
	}
	n := startNode(t, tools, bin, host, []string{
		"CONTAINERD=" + filepath.Join(tools, "containerd-1.7"),
		"SHIM_PATH=" + filepath.Join(tools, "containerd-1.7-shim"),
		"CONTAINERD_CONFIG=" + containerdConfig,
	}, []string{"nvidia.com/mig-1g.5gb"})
	n.pod(t, "mig", "nvidia.com/mig-1g.5gb", 1)
	got := n.output(t, "mig")
	want := []string{"/dev/nvidia-caps/nvidia-cap606", "/dev/nvidia-caps/nvidia-cap607", "/dev/nvidia4"}
	var nodes []string
	for _, l := range got {
		if strings.HasPrefix(l, "/dev/nvidia") {
			nodes = append(nodes, l)
		}
	}
	if !slices.Equal(nodes, want) {
		t.Errorf("containerd 1.7 pod sees %v, want %v", nodes, want)
	}
	if !slices.Contains(got, "VDPAU") {
		t.Errorf("containerd 1.7 pod has no VDPAU library (driver-capabilities video, through the annotation):\n%s", strings.Join(got, "\n"))
	}
	spec, err := os.ReadFile(filepath.Join(n.work, "cdi", "nvidia.yaml"))
	if err != nil || !strings.Contains(string(spec), `path: "`+filepath.Join(hookDir, "gpuctk-hook")+`"`) {
		t.Errorf("the spec does not call the hook in --hook-dir (%v)", err)
	}
	if fi, err := os.Stat(filepath.Join(hookDir, "gpuctk-hook")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("hook in --hook-dir: %v", err)
	}
	labels, err := os.ReadFile(filepath.Join(labelsDir, "gpuctk"))
	if err != nil || !strings.Contains(string(labels), "nvidia.com/mig.strategy=mixed\n") || !strings.Contains(string(labels), "nvidia.com/mig-1g.5gb.count=9\n") {
		t.Errorf("labels file: %v\n%s", err, labels)
	}
}
