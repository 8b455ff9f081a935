package k8s

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/specs-go"
)

// decodeStrict reads a manifest of deployments/kubernetes with the
// Kubernetes API types: an unknown field fails.
func decodeStrict(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "deployments/kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// hostDirs are the test's stand-ins for what the DaemonSet reads and
// writes on the host, all in temporary folders.
type hostDirs struct {
	config, driverRoot, hook, features, store string
}

// staticPod turns the DaemonSet's pod template into the pod a kubelet with
// no API server runs from its manifests folder. Each change is one a
// standalone test node needs; everything else is the manifest's own.
func staticPod(t *testing.T, ds *appsv1.DaemonSet, namespace, image string, h hostDirs) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: namespace, Labels: ds.Spec.Template.Labels},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	spec := &pod.Spec
	// No CNI here: only the host's network.
	spec.HostNetwork = true
	if len(spec.Containers) != 1 {
		t.Fatalf("the DaemonSet has %d containers, the test knows one", len(spec.Containers))
	}
	c := &spec.Containers[0]
	// No registry: the image is the archive the test imported.
	c.Image, c.ImagePullPolicy = image, corev1.PullNever

	volume := func(name string) *corev1.Volume {
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == name {
				return &spec.Volumes[i]
			}
		}
		t.Fatalf("the DaemonSet has no volume %q", name)
		return nil
	}
	// arg replaces the value of a flag in the container's args.
	arg := func(flag, value string) {
		i := slices.Index(c.Args, flag)
		if i < 0 || i+1 >= len(c.Args) {
			t.Fatalf("the DaemonSet's args have no %s VALUE: %q", flag, c.Args)
		}
		c.Args[i+1] = value
	}
	// relocate moves a host folder the plugin writes (mounted at the same
	// path, which its flag names, so the path is valid on the host too)
	// to a test folder: the host's /var/lib and /etc stay as found.
	relocate := func(name, flag, dir string) {
		v := volume(name)
		old := v.HostPath.Path
		v.HostPath.Path = dir
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == name && c.VolumeMounts[i].MountPath == old {
				c.VolumeMounts[i].MountPath = dir
			}
		}
		arg(flag, dir)
	}

	// No API server, so no ConfigMap: a host folder holding its data.
	volume("config").VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: h.config, Type: ptr(corev1.HostPathDirectory)}}
	// The driver: a fake dgx-a100 root (files and device nodes) in place
	// of the host's /, still seen at /driver-root, so --host-driver-root
	// (the host's path of that root, for the spec's mounts) names it.
	volume("driver-root").HostPath.Path = h.driverRoot
	arg("--host-driver-root", h.driverRoot)
	// The harness's host has only /run shared (a node's systemd makes /
	// shared), and containerd refuses HostToContainer from a private
	// mount: the fake root, in a temp folder, is mounted without it.
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == "driver-root" {
			c.VolumeMounts[i].MountPropagation = nil
		}
	}
	// /dev and /proc: the fake root's, seen at the host's path. The MIG
	// capability minors are in /proc/driver/nvidia-caps, which no mount can
	// fake inside the container's /proc (runc refuses mounts there), and
	// the spec names the dev root's nodes as its hostPaths unrebased, so
	// the plugin must see it where the host has it.
	arg("--dev-root", h.driverRoot)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "fake-dev-root", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: h.driverRoot, Type: ptr(corev1.HostPathDirectory)}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "fake-dev-root", MountPath: h.driverRoot, ReadOnly: true})
	// No GPU, no NVML: the fake root's host as a profile.
	c.Args = append(c.Args, "--simulate", "dgx-a100")
	relocate("hook", "--hook-dir", h.hook)
	relocate("features", "--labels-dir", h.features)
	relocate("driver-store", "--driver-store", h.store)
	// Kept as they are: the kubelet's device-plugins folder and
	// /var/run/cdi (inside the harness, WORK/kubelet and WORK/cdi are
	// bind-mounted there), /dev, and /run/gpuctk/mps (in the harness's
	// own /run). The node selection is kept too: the kubelet gets the labels.
	return pod
}

func ptr[T any](v T) *T { return &v }

// nodeLabels are the labels of a fresh GPU node that the DaemonSet must
// run on: its nodeSelector's and the first term of its required node
// affinity.
func nodeLabels(t *testing.T, ds *appsv1.DaemonSet) []string {
	t.Helper()
	spec := ds.Spec.Template.Spec
	var labels []string
	for k, v := range spec.NodeSelector {
		labels = append(labels, k+"="+v)
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) == 0 {
			t.Fatal("the DaemonSet's node affinity has no term")
		}
		for _, e := range terms[0].MatchExpressions {
			if e.Operator != corev1.NodeSelectorOpIn || len(e.Values) == 0 {
				t.Fatalf("the DaemonSet's node affinity has %s %s, the test knows In", e.Key, e.Operator)
			}
			labels = append(labels, e.Key+"="+e.Values[0])
		}
	}
	if len(labels) == 0 {
		t.Fatal("the DaemonSet selects no nodes by label: it would run on nodes without GPUs")
	}
	return labels
}

// TestKubeletDaemonSet runs deployments/kubernetes/device-plugin.yaml's
// pod as a static pod from the image `make image` builds: the plugin
// registers its resources, writes the spec with the hook it installs on
// the host and the node's labels, and a pod asking for a GPU gets it.
func TestKubeletDaemonSet(t *testing.T) {
	tools, bin := prepare(t)
	build(t, bin, false, "cmd/gpuctk-runtime")

	// The image, as `make image` builds it, from the binaries just built.
	image := fmt.Sprintf("docker.io/gpuctk/gpuctk:e2e-%d", time.Now().UnixNano())
	archive := filepath.Join(t.TempDir(), "gpuctk-image.tar")
	cmd := exec.Command("go", "run", "./tools/ociimage", "-o", archive, "-name", image, "-arch", runtime.GOARCH,
		filepath.Join(bin, "gpuctk"), filepath.Join(bin, "gpuctk-hook"), filepath.Join(bin, "gpuctk-runtime"), filepath.Join(bin, "gpuctk-device-plugin"))
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ociimage: %v\n%s", err, out)
	}

	var ds appsv1.DaemonSet
	decodeStrict(t, "device-plugin.yaml", &ds)
	var cm corev1.ConfigMap
	decodeStrict(t, "configmap.yaml", &cm)
	// kustomize's namespace, for the pod's log folder (kustomize's types
	// are not in k8s.io/api: read just that field).
	var k struct {
		Namespace string `json:"namespace"`
	}
	if data, err := os.ReadFile(filepath.Join(repoRoot(), "deployments/kubernetes/kustomization.yaml")); err != nil {
		t.Fatal(err)
	} else if err := yaml.Unmarshal(data, &k); err != nil || k.Namespace == "" {
		t.Fatalf("kustomization.yaml: no namespace (%v)", err)
	}

	h := hostDirs{
		config:     t.TempDir(),
		driverRoot: fakeDriver(t, bin),
		hook:       filepath.Join(t.TempDir(), "bin"),
		features:   filepath.Join(t.TempDir(), "features.d"),
		store:      filepath.Join(t.TempDir(), "driver"),
	}
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(h.config, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pod := staticPod(t, &ds, k.Namespace, image, h)
	manifest, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	// A second config in the ConfigMap, for per-node configs.
	if err := os.WriteFile(filepath.Join(h.config, "shared2.toml"), []byte(sharedConfig), 0o644); err != nil {
		t.Fatal(err)
	}

	// The DaemonSet runs on GPU nodes as Node Feature Discovery labels a
	// fresh one (its affinity's first term); the kubelet checks a static
	// pod's nodeSelector and required node affinity against its own labels.
	env := []string{"KUBELET_ARGS=--node-labels=" + strings.Join(nodeLabels(t, &ds), ",")}
	started := time.Now()
	n := startHarness(t, tools, append(env, "IMAGES="+archive))
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(n.work, "log/pods", k.Namespace+"_"+ds.Name+"-*", "*", "0.log"))
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, data)
			}
			t.Logf("pods:\n%s", n.pods(t))
		}
	})
	n.staticPod(t, ds.Name, manifest)
	n.waitResources(t, 60*time.Second, n.harnessDied, []string{"nvidia.com/gpu"})
	t.Logf("kubelet up and the plugin's pod registered in %s", time.Since(started).Round(time.Millisecond))
	// Ready: its readiness probe (gpuctk-device-plugin probe --ready, run
	// in the container) reached the sockets it serves.
	waitFor(t, 60*time.Second, "the plugin's pod to be Ready", n.harnessDied, func() bool { return n.podReady(t, ds.Name) })

	t.Run("spec", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(n.work, "cdi", "nvidia.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var s specs.Spec
		if err := yaml.Unmarshal(data, &s); err != nil {
			t.Fatalf("the plugin's spec: %v", err)
		}
		// The host's runtime reads the spec: every path it names must be
		// the host's, none the plugin's view (/driver-root).
		hostPaths := map[string]bool{}
		edits := []specs.ContainerEdits{s.ContainerEdits}
		for _, d := range s.Devices {
			edits = append(edits, d.ContainerEdits)
		}
		for _, e := range edits {
			for _, m := range e.Mounts {
				hostPaths[m.HostPath] = true
			}
			for _, d := range e.DeviceNodes {
				if d.HostPath != "" {
					hostPaths[d.HostPath] = true
				}
			}
			for _, hk := range e.Hooks {
				hostPaths[hk.Path] = true
			}
		}
		wantHook := filepath.Join(h.hook, "gpuctk-hook")
		if !hostPaths[wantHook] {
			t.Errorf("the spec does not call the hook in --hook-dir, %s", wantHook)
		}
		// Rebased from /driver-root: the fake root's nodes. The
		// DaemonSet's driver root is read-only: no hard link can be made
		// there, so the driver folder is made in --driver-store (a host
		// folder at the same path), copies of the fake root's libraries,
		// libcuda's among them, which the spec mounts.
		if !hostPaths[filepath.Join(h.driverRoot, "dev/nvidia0")] {
			t.Errorf("the spec does not name the fake root's /dev/nvidia0")
		}
		var inStore []string
		for p := range hostPaths {
			if strings.HasPrefix(p, h.store+"/") {
				inStore = append(inStore, p)
			}
		}
		copies, _ := filepath.Glob(filepath.Join(h.store, "*", "core", "libcuda.so.580.65.06"))
		if len(inStore) == 0 || len(copies) != 1 {
			t.Errorf("the spec mounts %q from --driver-store %s, which holds libcuda %q: want the driver folder there", inStore, h.store, copies)
		}
		for p := range hostPaths {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("the spec names a path the host lacks: %v", err)
			}
		}
		// The hook is the image's, installed on the host.
		want, _ := os.ReadFile(filepath.Join(bin, "gpuctk-hook"))
		if got, err := os.ReadFile(wantHook); err != nil || !bytes.Equal(got, want) {
			t.Errorf("the hook in --hook-dir is not the image's gpuctk-hook (%v)", err)
		}
		if fi, err := os.Stat(wantHook); err == nil && fi.Mode().Perm() != 0o755 {
			t.Errorf("the hook in --hook-dir has mode %v, want 0755", fi.Mode().Perm())
		}
	})

	t.Run("labels", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(h.features, "gpuctk"))
		if err != nil {
			t.Fatal(err)
		}
		// The ConfigMap's mig-strategy none: 8 whole GPUs.
		for _, l := range []string{"nvidia.com/gpu.count=8", "nvidia.com/mig.strategy=none", "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB"} {
			if !slices.Contains(strings.Split(string(data), "\n"), l) {
				t.Errorf("labels file has no line %q:\n%s", l, data)
			}
		}
	})

	t.Run("pod", func(t *testing.T) {
		n.pod(t, "app", "nvidia.com/gpu", 1)
		got := n.output(t, "app")
		t.Logf("the pod sees:\n%s", strings.Join(got, "\n"))
		gpu := regexp.MustCompile(`^/dev/nvidia[0-7]$`)
		var nodes []string
		for _, l := range got {
			if strings.HasPrefix(l, "/dev/nvidia") {
				nodes = append(nodes, l)
			}
		}
		if len(nodes) != 1 || !gpu.MatchString(nodes[0]) {
			t.Errorf("pod asking for one nvidia.com/gpu sees %q, want one /dev/nvidiaN", nodes)
		}
	})

	// Last, as it replaces the plugin's pod: the per-node component's
	// pod, as kustomize renders it, choosing its config by the name file.
	t.Run("per-node", func(t *testing.T) {
		ds := renderedDaemonSet(t, "kustomize-per-node.yaml", ds.Name)
		names := t.TempDir()
		if err := os.WriteFile(filepath.Join(names, "name"), []byte("shared2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		pod := staticPod(t, ds, k.Namespace, image, h)
		perNodeStandalone(t, pod, names)
		manifest, err := yaml.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		n.staticPod(t, ds.Name, manifest)
		features := filepath.Join(h.features, "gpuctk")
		waitFor(t, 90*time.Second, "the label's config shared2 (2 replicas)", n.harnessDied, fileContains(features, "nvidia.com/gpu.replicas=2\n"))
		// The label changes: the name file follows, the plugin switches
		// without a restart.
		if err := os.WriteFile(filepath.Join(names, "name"), []byte("config\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the label's config, config.toml (whole GPUs)", n.harnessDied, fileContains(features, "nvidia.com/gpu.replicas=1\n"))
	})
}

// sharedConfig shares every GPU two ways.
const sharedConfig = "[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"

// staticPod writes a pod manifest for the kubelet to run (or to replace
// the pod of that name with).
func (n *node) staticPod(t *testing.T, name string, manifest []byte) {
	t.Helper()
	// Dotfiles are ignored: write, then rename, so the kubelet never
	// parses half a pod.
	tmp := filepath.Join(n.work, "manifests", "."+name+".tmp")
	if err := os.WriteFile(tmp, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.work, "manifests", name+".yaml")); err != nil {
		t.Fatal(err)
	}
}

// renderedDaemonSet is a DaemonSet of a golden file of tests/render (what
// `kubectl apply -k` deploys), decoded strictly.
func renderedDaemonSet(t *testing.T, file, name string) *appsv1.DaemonSet {
	t.Helper()
	path := filepath.Join(repoRoot(), "deployments/kubernetes/testdata/rendered", file)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var ds appsv1.DaemonSet
		if !strings.Contains(doc, "\nkind: DaemonSet\n") {
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if ds.Name == name {
			return &ds
		}
	}
	t.Fatalf("%s has no DaemonSet %s", path, name)
	return nil
}

// perNodeStandalone makes the per-node pod one a kubelet without an API
// server runs: no service account (no token to get) and no NODE_NAME
// (no Node to read the label from); the test writes the name file in
// names, as --node-name does from the label.
func perNodeStandalone(t *testing.T, pod *corev1.Pod, names string) {
	t.Helper()
	spec := &pod.Spec
	spec.ServiceAccountName = ""
	c := &spec.Containers[0]
	n := len(spec.Volumes)
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "service-account" })
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "service-account" })
	e := len(c.Env)
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" })
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "config-name" && v.EmptyDir != nil })
	if len(spec.Volumes) != n-1 || len(c.Env) != e-1 || i < 0 {
		t.Fatalf("the per-node pod has no service-account volume, NODE_NAME or config-name emptyDir: %+v %+v", spec.Volumes, c.Env)
	}
	spec.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: names, Type: ptr(corev1.HostPathDirectory)}}
}
