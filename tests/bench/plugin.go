package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pb "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// pluginProfile is the host the plugin simulates in the kubelet run: the
// end-to-end test's, with whole GPUs (mig-strategy none) as nvidia.com/gpu.
const pluginProfile = "dgx-a100"

// plugin measures gpuctk-device-plugin: ListAndWatch of the largest host
// (the deviceplugin package's Go benchmark), then, with the real plugin
// registered with a real kubelet and containerd, Allocate beside a bare
// call on the plugin's own socket, and what one device adds to a pod's
// start.
func (b *bench) plugin() error {
	if _, err := os.Stat(b.bin("gpuctk-device-plugin")); err != nil {
		return fmt.Errorf("%w (make build)", err)
	}
	b.step("running the deviceplugin package's ListAndWatch benchmark (%d runs of %s each)", b.o.runs, b.o.benchtime)
	gb, err := goBenchMetrics(b.o.repo, "./deviceplugin/", "^BenchmarkListAndWatch$", b.o.runs, b.o.benchtime)
	if err != nil {
		return err
	}
	lw := gb["BenchmarkListAndWatch"]
	if len(lw["ns/op"]) == 0 || len(lw["bytes/msg"]) == 0 || len(lw["devices"]) == 0 {
		return fmt.Errorf("BenchmarkListAndWatch reported no ns/op, bytes/msg or devices: %v", lw)
	}
	var times []time.Duration
	for _, ns := range lw["ns/op"] {
		times = append(times, time.Duration(ns))
	}
	b.r.function(fmt.Sprintf("Device plugin, ListAndWatch: open the stream, first message, %s, every MIG device shared 8 ways (%d devices, %d bytes)",
		largestProfile, int(lw["devices"][0]), int(lw["bytes/msg"][0])), &sample{times: times}, 0)

	b.step("starting a kubelet and containerd (tests/k8s/harness), the plugin simulating %s", pluginProfile)
	n, err := b.startNode("", "")
	if n != nil {
		defer n.stop(b)
	}
	if err != nil {
		return err
	}

	b.step("timing: Allocate beside GetDevicePluginOptions on the plugin's socket, %d calls each", 100*b.o.runs)
	bare, alloc, err := n.allocate(100 * b.o.runs)
	if err != nil {
		return err
	}
	b.r.quantiles("Device plugin, Allocate of one nvidia.com/gpu, real plugin registered with the kubelet",
		"bare gRPC call (GetDevicePluginOptions) on the same socket", bare, alloc, time.Millisecond)

	// Pod start: the kubelet is the measure. Each pod is timed from the
	// rename of its manifest into the static pod folder (the kubelet
	// watches it with inotify) to the timestamp containerd gives the
	// container's first line of output (RFC 3339, nanoseconds; the pod
	// status's startedAt has whole seconds only). Both read the same
	// clock. A plain pod and a pod with one nvidia.com/gpu alternate, the
	// order reversed every other round, and each pod is deleted, and gone
	// from the kubelet, before the next starts, so that each starts on an
	// idle node; the first round is untimed (first use of the image).
	rounds := b.o.pods
	spec := filepath.Join(n.work, "cdi", "nvidia.yaml")
	if data, err := os.ReadFile(spec); err != nil || !strings.Contains(string(data), `containerPath: "/usr/lib/gpuctk/core"`) {
		return fmt.Errorf("the plugin's spec %s does not mount the driver folder (the default): %v", spec, err)
	}
	b.step("timing: pod start, plain and with one nvidia.com/gpu, %d pairs", rounds)
	if err := b.podRows(n, rounds, "", "Pod start with one nvidia.com/gpu (plugin's Allocate, CDI in containerd, the hook): manifest written to the container's first line",
		10*time.Millisecond, "Pod start,", 1, 2, 3, 4, 5, 6); err != nil {
		return err
	}

	// The same with a mount per driver file, as before the driver folder
	// (and as wherever it cannot be made): the plugin reloads its
	// configuration and rewrites the spec.
	b.step("timing: pod start with [cdi] driver-folder = false, %d pairs", rounds)
	if err := os.WriteFile(n.config, []byte(fmt.Sprintf("[cdi]\nhook-path = %q\ndriver-folder = false\n", b.bin("gpuctk-hook"))), 0o644); err != nil {
		return err
	}
	if err := n.waitFor(30*time.Second, "the plugin's spec without the driver folder", func() bool {
		data, err := os.ReadFile(spec)
		return err == nil && !strings.Contains(string(data), "/usr/lib/gpuctk/core")
	}); err != nil {
		return err
	}
	if err := b.podRows(n, rounds, "files-", "Pod start, the same with [cdi] driver-folder = false (each driver file a mount of its own), for comparison",
		0, "Pod start, the same with driver-folder = false,", 6); err != nil {
		return err
	}
	n.stop(b)
	if !b.o.journal {
		return nil
	}
	return b.journaledPods(rounds)
}

// journaledPods times the pod pairs again on a node whose folders (the
// kubelet's root, containerd's root and state, the pods' logs) are on a
// journaled ext4, made in a file of the work folder and loop-mounted for
// the run. This VM's disk is ext4 without a journal, where a new inode
// skips every inode deleted in the last seconds (find_inode_bit's
// recently_deleted check, made only without a journal): after the pods
// the bench deletes, each name a container's layer gains costs 0.2 to 0.5
// ms there. A node's /var/lib is journaled ext4 or xfs as distributions
// install them.
func (b *bench) journaledPods(rounds int) (err error) {
	for _, t := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s is needed for the journaled ext4 rows (-journal=false leaves them out): %w", t, err)
		}
	}
	img := filepath.Join(b.work, "journaled.ext4")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return err
	}
	defer os.Remove(img)
	if err := os.Truncate(img, 4<<30); err != nil {
		return err
	}
	// Inode tables and journal written now: the kernel's lazy init would
	// otherwise write them in the background during the timed pods.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", img).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %v: %s", img, err, out)
	}
	// Short: the kubelet's sockets live under it (108 bytes a path).
	mnt, err := os.MkdirTemp("", "gb-ext4-")
	if err != nil {
		return err
	}
	defer os.Remove(mnt)
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("mount -o loop %s: %v: %s", img, err, out)
	}
	defer func() {
		if out, uerr := exec.Command("umount", mnt).CombinedOutput(); uerr != nil {
			// Busy a moment after the harness's namespaces go: detach.
			if out2, lerr := exec.Command("umount", "-l", mnt).CombinedOutput(); lerr != nil && err == nil {
				err = fmt.Errorf("umount %s: %v: %s %s", mnt, uerr, out, out2)
			}
		}
	}()
	if err := journaled(mnt); err != nil {
		return err
	}
	b.step("starting a kubelet and containerd with their folders on a journaled ext4 (%s on %s)", img, mnt)
	n, err := b.startNode(mnt, "-ext4")
	if n != nil {
		defer n.stop(b)
	}
	if err != nil {
		return err
	}
	b.step("timing: pod start on the journaled ext4, plain and with one nvidia.com/gpu, %d pairs", rounds)
	return b.podRows(n, rounds, "ext4-", "Pod start, the same with the kubelet's and containerd's folders on a journaled ext4 (a loop-mounted file): manifest written to the container's first line",
		10*time.Millisecond, "Pod start on the journaled ext4,", 1, 4, 6)
}

// podRows times rounds pairs of pods on n (podPairs; prefix names them)
// and adds the row of the whole start, named what, with its target (0:
// none), and one row for each phase asked (numbered from 1, see
// phaseNames), named after phaseRow.
func (b *bench) podRows(n *node, rounds int, prefix, what string, target time.Duration, phaseRow string, phases ...int) error {
	plain, gpu, plainPh, gpuPh, err := n.podPairs(rounds, prefix)
	if err != nil {
		return err
	}
	b.r.timed(what, "plain pod in the same kubelet run", plain, gpu, target)
	for _, p := range phases {
		b.r.timed(phaseRow+" phase "+strconv.Itoa(p)+": "+phaseNames[p-1], "the same phase of the plain pod", plainPh[p-1], gpuPh[p-1], 0)
	}
	return nil
}

// journaled checks that the file system mounted at dir has a journal:
// the kernel lists a jbd2 instance for its device.
func journaled(dir string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	name := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	dev, err := os.ReadFile(filepath.Join("/sys/dev/block", name, "uevent"))
	if err != nil {
		return fmt.Errorf("the device of %s (%s): %w", dir, name, err)
	}
	for _, l := range strings.Split(string(dev), "\n") {
		if v, ok := strings.CutPrefix(l, "DEVNAME="); ok {
			if _, err := os.Stat(filepath.Join("/proc/fs/jbd2", v+"-8")); err != nil {
				return fmt.Errorf("%s (/dev/%s) has no journal (/proc/fs/jbd2/%s-8): %w", dir, v, v, err)
			}
			return nil
		}
	}
	return fmt.Errorf("the device of %s (%s) has no DEVNAME", dir, name)
}

// podPairs starts rounds pairs of pods, a plain one and one with one
// nvidia.com/gpu, after one untimed pair (first use of the image), and
// returns their start times and phases (see podStart); prefix names them.
func (n *node) podPairs(rounds int, prefix string) (plain, gpu *sample, plainPh, gpuPh []*sample, err error) {
	plain, gpu = &sample{}, &sample{}
	// The same pods split into phases by containerd's log (see podPhases).
	plainPh, gpuPh = make([]*sample, len(phaseNames)), make([]*sample, len(phaseNames))
	for i := range phaseNames {
		plainPh[i], gpuPh[i] = &sample{}, &sample{}
	}
	for r := -1; r < rounds; r++ {
		kinds := []bool{false, true}
		if r%2 != 0 {
			kinds = []bool{true, false}
		}
		for _, withGPU := range kinds {
			name := fmt.Sprintf("%splain-%d", prefix, r+1)
			if withGPU {
				name = fmt.Sprintf("%sgpu-%d", prefix, r+1)
			}
			d, phases, err := n.podStart(name, withGPU)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			if r < 0 {
				continue
			}
			s, ph := plain, plainPh
			if withGPU {
				s, ph = gpu, gpuPh
			}
			s.times = append(s.times, d)
			for i, p := range phases {
				ph[i].times = append(ph[i].times, p)
			}
		}
	}
	return plain, gpu, plainPh, gpuPh, nil
}

// phaseNames are the parts of a pod's start that podPhases tells apart,
// in order; together they make the whole.
var phaseNames = []string{
	"manifest to RunPodSandbox (kubelet: admission, the device manager's Allocate and checkpoint)",
	"RunPodSandbox (containerd: pause container)",
	"sandbox ready to CreateContainer (kubelet: container config, device run options)",
	"CreateContainer (containerd: CDI injection into the OCI spec)",
	"created to StartContainer (kubelet)",
	"StartContainer to the first line (runc: device nodes, mounts, the hook, the process)",
}

// podPhases splits a pod's start, from t0 (its manifest's rename) to
// first (its container's first line), at the times containerd logs the
// CRI calls for it: RunPodSandbox, CreateContainer and StartContainer,
// each when asked and when answered.
func podPhases(containerdLog []byte, pod string, t0, first time.Time) ([]time.Duration, error) {
	var marks []time.Time
	sandbox, container := "", ""
	for _, line := range strings.Split(string(containerdLog), "\n") {
		var want string
		switch len(marks) {
		case 0:
			want = `msg="RunPodSandbox for name:\"` + pod + `\"`
		case 1:
			want = `msg="RunPodSandbox for name:\"` + pod + `\"`
			if !strings.Contains(line, "returns sandbox id") {
				continue
			}
		case 2:
			want = `msg="CreateContainer within sandbox \"` + sandbox + `\" for container `
		case 3:
			want = `msg="CreateContainer within sandbox \"` + sandbox + `\" for name:`
		case 4:
			want = `msg="StartContainer for \"` + container + `\""`
		default:
			want = "\x00" // done
		}
		if !strings.Contains(line, want) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, `time="`), `"`)
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return nil, fmt.Errorf("containerd log line %q: %w", line, err)
		}
		switch len(marks) {
		case 1:
			sandbox = quoted(line, "returns sandbox id ")
		case 3:
			container = quoted(line, "returns container id ")
		}
		marks = append(marks, t)
	}
	if len(marks) != 5 {
		return nil, fmt.Errorf("containerd's log names %d of the 5 CRI calls of pod %s", len(marks), pod)
	}
	all := append(append([]time.Time{t0}, marks...), first)
	out := make([]time.Duration, len(all)-1)
	for i := range out {
		out[i] = all[i+1].Sub(all[i])
	}
	return out, nil
}

// quoted returns the \"-quoted value after prefix in a containerd log line.
func quoted(line, prefix string) string {
	_, rest, _ := strings.Cut(line, prefix+`\"`)
	v, _, _ := strings.Cut(rest, `\"`)
	return v
}

// node is a standalone kubelet and containerd in private namespaces
// (tests/k8s/harness/run-standalone.sh), with the plugin on the host.
type node struct {
	work, ctr          string
	config             string // the plugin's configuration file
	harness, plugin    *exec.Cmd
	harnessDone, pDone chan struct{}
	keep, stopped      bool
}

// startNode starts a node whose work folder is made in parent (the
// system's temporary folder if ""); suffix tells its logs and plugin
// config in the bench's work folder from another node's.
func (b *bench) startNode(parent, suffix string) (*node, error) {
	tools, err := filepath.Abs(b.o.tools)
	if err != nil {
		return nil, err
	}
	for _, t := range []string{"kubelet", "containerd", "ctr", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(tools, t)); err != nil {
			return nil, fmt.Errorf("%s is not in %s: run make deps (mk/k8s.mk and mk/runtime.mk build it)", t, tools)
		}
	}
	profile, err := inventory.LoadProfile(pluginProfile)
	if err != nil {
		return nil, err
	}
	// A full 580 install: the two dozen files of compute and utility a
	// real host's spec gives every container.
	driver := filepath.Join(b.work, "k8s-driver")
	if err := fakehost.BuildFull(driver, profile); err != nil {
		return nil, fmt.Errorf("fake driver root for %s: %w", pluginProfile, err)
	}
	cfg := writeFile(b.work, "plugin"+suffix+".toml", fmt.Sprintf("[cdi]\nhook-path = %q\n", b.bin("gpuctk-hook")))
	// Under /tmp, not the bench's work folder: the kubelet's sockets live
	// in it and a socket's path is capped at 108 bytes.
	work, err := os.MkdirTemp(parent, "gpuctk-bench-k8s-")
	if err != nil {
		return nil, err
	}
	n := &node{work: work, ctr: filepath.Join(tools, "ctr"), config: cfg, keep: b.o.keep}
	log, err := os.Create(filepath.Join(b.work, "harness"+suffix+".log"))
	if err != nil {
		return n, err
	}
	defer log.Close()
	n.harness = exec.Command(filepath.Join(b.o.repo, "tests/k8s/harness/run-standalone.sh"), work, tools)
	n.harness.Stdout, n.harness.Stderr = log, log
	// This program dying tears the namespaces down.
	n.harness.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if n.harnessDone, err = startCmd(n.harness); err != nil {
		return n, err
	}
	if err := n.waitFor(120*time.Second, "the kubelet (see "+log.Name()+")", func() bool {
		_, err := os.Stat(filepath.Join(work, "ready"))
		return err == nil
	}); err != nil {
		return n, err
	}
	n.plugin = exec.Command(b.bin("gpuctk-device-plugin"), "--config", cfg, "--simulate", pluginProfile, "--driver-root", driver)
	n.plugin.Env = append(os.Environ(), "GPUCTK_KUBELET_DIR="+filepath.Join(work, "kubelet/device-plugins"),
		"GPUCTK_CDI_DIR="+filepath.Join(work, "cdi"))
	plog, err := os.Create(filepath.Join(b.work, "plugin"+suffix+".log"))
	if err != nil {
		return n, err
	}
	defer plog.Close()
	n.plugin.Stdout, n.plugin.Stderr = plog, plog
	if n.pDone, err = startCmd(n.plugin); err != nil {
		return n, err
	}
	// A pod asking for a resource not yet advertised runs without it.
	checkpoint := filepath.Join(work, "kubelet/device-plugins/kubelet_internal_checkpoint")
	return n, n.waitFor(30*time.Second, "nvidia.com/gpu in the kubelet's checkpoint (see "+plog.Name()+")", func() bool {
		data, _ := os.ReadFile(checkpoint)
		return strings.Contains(string(data), `"nvidia.com/gpu":[`)
	})
}

func startCmd(c *exec.Cmd) (chan struct{}, error) {
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	return done, nil
}

// waitFor polls cond until it holds, either process exits, or d passes.
func (n *node) waitFor(d time.Duration, what string, cond func() bool) error {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return nil
		}
		for _, c := range []chan struct{}{n.harnessDone, n.pDone} {
			select {
			case <-c:
				return fmt.Errorf("waiting for %s: the harness or the plugin exited", what)
			default:
			}
		}
	}
	return fmt.Errorf("timed out after %s waiting for %s", d, what)
}

// stop stops the plugin, then the harness, which tears the namespaces
// down; the work folder goes only once the harness is gone.
func (n *node) stop(b *bench) {
	if n.stopped {
		return
	}
	n.stopped = true
	for _, p := range []struct {
		cmd  *exec.Cmd
		done chan struct{}
		wait time.Duration
	}{{n.plugin, n.pDone, 10 * time.Second}, {n.harness, n.harnessDone, 60 * time.Second}} {
		if p.done == nil {
			continue
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(p.wait):
			b.step("%s did not stop on SIGTERM: killed", filepath.Base(p.cmd.Path))
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	if !n.keep {
		os.RemoveAll(n.work)
	}
}

// allocate calls Allocate for one GPU and GetDevicePluginOptions, which
// does no work, in turn on the plugin's socket, calls times each after
// 100 untimed; it alternates which goes first, as interleave does.
func (n *node) allocate(calls int) (bare, alloc []time.Duration, err error) {
	sock := filepath.Join(n.work, "kubelet/device-plugins", "gpuctk-nvidia.com_gpu.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("the plugin's socket %s: %w", sock, err)
	}
	defer conn.Close()
	c := pb.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: []string{"0"}}}}
	timeOne := func(doAlloc bool) (time.Duration, error) {
		t := time.Now()
		var err error
		if doAlloc {
			_, err = c.Allocate(ctx, req)
		} else {
			_, err = c.GetDevicePluginOptions(ctx, &pb.Empty{})
		}
		return time.Since(t), err
	}
	for i := -100; i < calls; i++ {
		var d [2]time.Duration
		for k := range 2 {
			which := (k + i) & 1
			if d[which], err = timeOne(which == 1); err != nil {
				return nil, nil, fmt.Errorf("device plugin call on %s: %w", sock, err)
			}
		}
		if i >= 0 {
			bare, alloc = append(bare, d[0]), append(alloc, d[1])
		}
	}
	return bare, alloc, nil
}

// podStart starts a static pod whose container prints one line and
// exits, returns the time from its manifest's rename to that line's
// timestamp, then deletes the pod and waits until the kubelet no longer
// lists it.
func (n *node) podStart(name string, withGPU bool) (time.Duration, []time.Duration, error) {
	limits := ""
	if withGPU {
		limits = "\n    resources:\n      limits:\n        nvidia.com/gpu: 1"
	}
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: gpuctk.test/busybox:1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo started"]%s
`, name, limits)
	// The kubelet ignores dotfiles: it never reads half a manifest.
	dir := filepath.Join(n.work, "manifests")
	tmp, path := filepath.Join(dir, "."+name+".tmp"), filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(tmp, []byte(manifest), 0o644); err != nil {
		return 0, nil, err
	}
	t0 := time.Now()
	if err := os.Rename(tmp, path); err != nil {
		return 0, nil, err
	}
	var started time.Time
	var logFile string
	err := n.waitFor(60*time.Second, "pod "+name+"'s first line", func() bool {
		logs, _ := filepath.Glob(filepath.Join(n.work, "log/pods", "default_"+name+"-*", "c", "0.log"))
		if len(logs) == 0 {
			return false
		}
		logFile = logs[0]
		data, _ := os.ReadFile(logs[0])
		// CRI format: TIME STREAM TAG line.
		first, _, ok := strings.Cut(string(data), " ")
		if !ok {
			return false
		}
		var err error
		started, err = time.Parse(time.RFC3339Nano, first)
		return err == nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%w; the kubelet's pods: %s", err, n.pods())
	}
	// The CRI calls are logged before the first line is: read them now.
	clog, err := os.ReadFile(filepath.Join(n.work, "containerd.log"))
	if err != nil {
		return 0, nil, err
	}
	// The static pod's name, <name>-<node>, from its log folder
	// log/pods/<namespace>_<pod>_<uid>/.
	pod := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(logFile))), "default_")
	pod = pod[:strings.LastIndex(pod, "_")+len("_")-1]
	phases, err := podPhases(clog, pod, t0, started)
	if err != nil {
		return 0, nil, err
	}
	if err := os.Remove(path); err != nil {
		return 0, nil, err
	}
	// Gone from the kubelet, and its sandbox stopped: a teardown left
	// running would slow the next pod's start.
	if err := n.waitFor(60*time.Second, "pod "+name+" to be deleted", func() bool {
		p := n.pods()
		if !strings.Contains(p, `"kind":"PodList"`) || strings.Contains(p, `"name":"`+name+`-`) {
			return false
		}
		out, err := exec.Command(n.ctr, "-a", filepath.Join(n.work, "containerd.sock"), "-n", "k8s.io", "tasks", "ls").Output()
		return err == nil && !strings.Contains(string(out), "RUNNING")
	}); err != nil {
		return 0, nil, err
	}
	return started.Sub(t0), phases, nil
}

// pods returns the kubelet's PodList from its read-only port, which
// listens in the harness's network namespace.
func (n *node) pods() string {
	pid, err := os.ReadFile(filepath.Join(n.work, "ns.pid"))
	if err != nil {
		return err.Error()
	}
	out, _ := exec.Command("nsenter", "-t", strings.TrimSpace(string(pid)), "-m", "-n",
		"busybox", "wget", "-qO-", "http://127.0.0.1:10255/pods").CombinedOutput()
	return string(out)
}

// quantile is the q-quantile of d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	t := slices.Clone(d)
	slices.Sort(t)
	return t[min(len(t)-1, max(0, int(float64(len(t))*q+0.999999)-1))]
}
