package kubernetes

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuctk/gpuctk/config"
)

// kustomization is the part of kustomize's types the test checks.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources,omitempty"`
	Components []string `json:"components,omitempty"`
	Patches    []struct {
		Path  string `json:"path,omitempty"`
		Patch string `json:"patch,omitempty"`
	} `json:"patches,omitempty"`
}

// patchDirective is a strategic merge patch's "$patch: delete" line,
// which no API type has a field for.
var patchDirective = regexp.MustCompile(`(?m)^\s*\$patch: delete\n`)

// decode reads a manifest strictly: an unknown or misspelt field fails. A
// patch's "$patch: delete" is kustomize's, not a field: it is left out.
func decode(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = patchDirective.ReplaceAll(data, nil)
	if bytes.Contains(data, []byte("\n---")) {
		t.Fatalf("%s: one object per file, so kustomization.yaml lists each", path)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// typed is the Kubernetes API type of a kind the manifests hold.
func typed(t *testing.T, where, kind string) any {
	t.Helper()
	switch kind {
	case "Namespace":
		return &corev1.Namespace{}
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "RuntimeClass":
		return &nodev1.RuntimeClass{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	case "ServiceAccount":
		return &corev1.ServiceAccount{}
	case "ClusterRole":
		return &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	case "DeviceClass":
		return &resourceapi.DeviceClass{}
	}
	t.Fatalf("%s: kind %q has no check here", where, kind)
	return nil
}

func kindOf(t *testing.T, where string, data []byte) string {
	t.Helper()
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return meta.Kind
}

// TestManifests decodes every manifest and patch the kustomizations list
// with the Kubernetes API types, strictly, and checks that none is left
// unlisted. What they deploy together is checked in TestRendered.
func TestManifests(t *testing.T) {
	for _, dir := range []string{".", "mps", "mps-host", "per-node", "dra"} {
		var k kustomization
		decode(t, filepath.Join(dir, "kustomization.yaml"), &k)
		listed := slices.Clone(k.Resources)
		for _, p := range k.Patches {
			if p.Path != "" { // an inline patch has none
				listed = append(listed, p.Path)
			}
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range files {
			if filepath.Base(f) != "kustomization.yaml" && !slices.Contains(listed, filepath.Base(f)) {
				t.Errorf("%s is not listed in %s/kustomization.yaml", f, dir)
			}
		}
		for _, r := range listed {
			p := filepath.Join(dir, r)
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			decode(t, p, typed(t, p, kindOf(t, p, data)))
		}
	}
}

// rendered reads a golden file of tests/render (`kubectl apply -k` or
// `helm template` output), each object decoded strictly, by kind/name.
func rendered(t *testing.T, name string) map[string]any {
	t.Helper()
	path := filepath.Join("testdata/rendered", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (cd tests/render && go test -update writes it)", err)
	}
	objects := map[string]any{}
	for i, doc := range strings.Split("\n"+string(data), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		where := fmt.Sprintf("%s, object %d", path, i)
		obj := typed(t, where, kindOf(t, where, []byte(doc)))
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		m := obj.(metav1.Object)
		objects[kindOf(t, where, []byte(doc))+"/"+m.GetName()] = obj
	}
	return objects
}

// container is what the test expects of a DaemonSet's container.
type container struct {
	command []string
	mounts  map[string]string // mount path -> host path ("" for the ConfigMap)
	// propagation is the mount propagation a mount path needs. The
	// host's driver root at /driver-root is HostToContainer: without it
	// the pod keeps a private copy of every host mount of its start
	// (another pod's volume the host unmounts stays mounted in it) and
	// never sees a driver root mounted later (/run/nvidia/driver).
	propagation map[string]corev1.MountPropagationMode
	env         map[string]string
	hostPID     bool
	probes      bool
	// nodeLabels are the labels of a node it must run on, beside NFD's.
	nodeLabels map[string]string
	update     appsv1.DaemonSetUpdateStrategyType
	// perNode is the default of per-node configs ("": one config, no
	// Kubernetes API).
	perNode string
}

// Per-node configs: where the plugin writes its node's label, and where
// its service account token is.
const (
	nameFile          = "/run/gpuctk/config/name"
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// perNode is want choosing its config by the node's label: the ConfigMap
// as --config-dir (GPUCTK_CONFIG would be refused beside it), a writable
// folder for the name file, the token, the node's name.
func perNode(want container, def string) container {
	want.perNode = def
	want.env = maps.Clone(want.env)
	delete(want.env, "GPUCTK_CONFIG")
	maps.Copy(want.env, map[string]string{"GPUCTK_CONFIG_DIR": "/etc/gpuctk", "GPUCTK_CONFIG_DEFAULT": def, "GPUCTK_CONFIG_NAME_FILE": nameFile})
	want.mounts = maps.Clone(want.mounts)
	maps.Copy(want.mounts, map[string]string{filepath.Dir(nameFile): "emptyDir", serviceAccountDir: "projected"})
	return want
}

func pluginWant(driverRoot, config string, hostPID bool) container {
	return container{
		command: []string{"/usr/bin/gpuctk-device-plugin", "--driver-root", "/driver-root", "--host-driver-root", driverRoot, "--dev-root", "/",
			"--hook-dir", "/var/lib/gpuctk/bin", "--labels-dir", "/etc/kubernetes/node-feature-discovery/features.d",
			"--driver-store", "/var/lib/gpuctk/driver"},
		mounts: map[string]string{"/var/lib/kubelet/device-plugins": "/var/lib/kubelet/device-plugins",
			"/var/run/cdi": "/var/run/cdi", "/etc/gpuctk": "", "/driver-root": driverRoot, "/dev": "/dev", "/run/gpuctk/mps": "/run/gpuctk/mps",
			// The hook's host folder at the same path, as the spec names it.
			"/var/lib/gpuctk/bin": "/var/lib/gpuctk/bin", "/var/lib/gpuctk/driver": "/var/lib/gpuctk/driver", "/etc/kubernetes/node-feature-discovery/features.d": "/etc/kubernetes/node-feature-discovery/features.d"},
		propagation: map[string]corev1.MountPropagationMode{"/run/gpuctk/mps": corev1.MountPropagationHostToContainer,
			"/driver-root": corev1.MountPropagationHostToContainer},
		env:     map[string]string{"GPUCTK_CONFIG": "/etc/gpuctk/" + config, "GPUCTK_KUBELET_DIR": "/var/lib/kubelet/device-plugins", "GPUCTK_CDI_DIR": "/var/run/cdi"},
		hostPID: hostPID,
		probes:  true,
		update:  appsv1.RollingUpdateDaemonSetStrategyType,
	}
}

func mpsWant(driverRoot, config string) container {
	return container{
		command: []string{"/usr/bin/gpuctk", "mps", "run", "--driver-root", "/driver-root"},
		mounts:  map[string]string{"/run/gpuctk/mps": "/run/gpuctk/mps", "/etc/gpuctk": "", "/driver-root": driverRoot, "/dev": "/dev"},
		propagation: map[string]corev1.MountPropagationMode{"/run/gpuctk/mps": corev1.MountPropagationBidirectional,
			"/driver-root": corev1.MountPropagationHostToContainer},
		env: map[string]string{"GPUCTK_CONFIG": "/etc/gpuctk/" + config},
		// The daemons' pids must be the host's (TestMPSHostPID).
		hostPID: true,
		// Replacing the pod stops the daemons, cutting off their clients.
		update: appsv1.OnDeleteDaemonSetStrategyType,
	}
}

// TestRendered checks what `kubectl apply -k` and `helm template` deploy
// (tests/render's golden files, decoded strictly): the plugin and the MPS
// daemons with least privilege, on fresh GPU nodes, from make image's
// image.
func TestRendered(t *testing.T) {
	for _, tc := range []struct {
		file  string
		image string
		want  map[string]container
	}{
		{"kustomize.yaml", image(t), map[string]container{"gpuctk-device-plugin": pluginWant("/", "config.toml", false)}},
		{"kustomize-mps.yaml", image(t), map[string]container{"gpuctk-device-plugin": pluginWant("/", "config.toml", true), "gpuctk-mps": mpsWant("/", "config.toml")}},
		{"helm.yaml", image(t), map[string]container{"gpuctk-device-plugin": pluginWant("/", "config.toml", false)}},
		{"kustomize-per-node.yaml", image(t), map[string]container{"gpuctk-device-plugin": perNode(pluginWant("/", "config.toml", false), "config")}},
		// Several configs: per-node configs.
		{"helm-mps.yaml", "registry.example.com/gpu/gpuctk:1.2.0", map[string]container{
			"gpuctk-device-plugin": perNode(inPool(pluginWant("/run/nvidia/driver", "l40s.toml", true)), "l40s"), "gpuctk-mps": inPool(mpsWant("/run/nvidia/driver", "l40s.toml"))}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			objects := rendered(t, tc.file)
			rc, ok := objects["RuntimeClass/nvidia"].(*nodev1.RuntimeClass)
			if !ok || rc.Handler != "nvidia" {
				t.Errorf("no RuntimeClass nvidia with handler nvidia: %+v", rc)
			}
			cm, ok := objects["ConfigMap/gpuctk-config"].(*corev1.ConfigMap)
			if !ok {
				t.Fatalf("no ConfigMap gpuctk-config")
			}
			var daemonSets []string
			for name := range objects {
				if strings.HasPrefix(name, "DaemonSet/") {
					daemonSets = append(daemonSets, strings.TrimPrefix(name, "DaemonSet/"))
				}
			}
			if len(daemonSets) != len(tc.want) {
				t.Errorf("DaemonSets %q, want %d", daemonSets, len(tc.want))
			}
			for name, want := range tc.want {
				ds, ok := objects["DaemonSet/"+name].(*appsv1.DaemonSet)
				if !ok {
					t.Errorf("no DaemonSet %s", name)
					continue
				}
				if ds.Namespace != "gpuctk" {
					t.Errorf("%s: namespace %q, want gpuctk", name, ds.Namespace)
				}
				checkDaemonSet(t, ds, cm, tc.image, want)
			}
			checkRBAC(t, objects, tc.want["gpuctk-device-plugin"].perNode != "")
		})
	}
}

// inPool is want on the node pool of tests/render/testdata/values-mps.yaml.
func inPool(want container) container {
	want.nodeLabels = map[string]string{"pool": "gpu"}
	return want
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, cm *corev1.ConfigMap, image string, want container) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	fail := func(format string, args ...any) { t.Errorf(ds.Name+": "+format, args...) }
	if ds.Spec.UpdateStrategy.Type != want.update {
		fail("updateStrategy %q, want %q", ds.Spec.UpdateStrategy.Type, want.update)
	}
	if !gpuNodeSelected(pod, want.nodeLabels) {
		fail("a fresh GPU node (NFD's feature.node.kubernetes.io/pci-10de.present=true, nothing of nvidia.com/ yet) is not selected: %+v %+v", pod.NodeSelector, pod.Affinity)
	}
	for _, want := range []corev1.Toleration{
		{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
	} {
		if !slices.Contains(pod.Tolerations, want) {
			fail("no toleration %+v: %+v", want, pod.Tolerations)
		}
	}
	// Per-node configs give the plugin a token of its own (a projected
	// volume), not the automounted one every container of the pod gets.
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		fail("automountServiceAccountToken is not false")
	}
	if want.perNode == "" && pod.ServiceAccountName != "" {
		fail("service account %q: it reads no Kubernetes API", pod.ServiceAccountName)
	}
	if want.perNode != "" && pod.ServiceAccountName != "gpuctk-device-plugin" {
		fail("service account %q, want gpuctk-device-plugin, allowed to get its node", pod.ServiceAccountName)
	}
	if pod.HostPID != want.hostPID {
		fail("hostPID %v, want %v (only MPS needs the host's pids)", pod.HostPID, want.hostPID)
	}
	if pod.HostNetwork || pod.HostIPC {
		fail("hostNetwork or hostIPC: nothing needs them")
	}
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("%s: %d containers and %d init containers, want 1 and 0", ds.Name, len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	if c.Image != image {
		fail("image %q, want %q", c.Image, image)
	}
	if got := append(slices.Clone(c.Command), c.Args...); !slices.Equal(got, want.command) {
		fail("command %q, want %q", got, want.command)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		fail("the root file system is writable")
	}
	// Privileged: the device nodes NVML opens (no capability grants a
	// device node), and for the MPS daemons Bidirectional propagation,
	// which Kubernetes refuses to an unprivileged container.
	if sc == nil || sc.Privileged == nil || !*sc.Privileged {
		fail("not privileged: NVML cannot open /dev/nvidiactl and the GPUs' nodes")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		fail("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	if want.probes {
		for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if p == nil || p.Exec == nil || len(p.Exec.Command) < 2 || p.Exec.Command[0] != c.Command[0] || p.Exec.Command[1] != "probe" {
				fail("%s probe %+v, want %s probe", name, p, c.Command[0])
			}
		}
		if p := c.ReadinessProbe; p != nil && p.Exec != nil && !slices.Contains(p.Exec.Command, "--ready") {
			fail("the readiness probe %q has no --ready", p.Exec.Command)
		}
	}
	for k, v := range want.env {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == k && e.Value == v }) {
			fail("no env %s=%s: %+v", k, v, c.Env)
		}
	}
	nodeName := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	})
	if nodeName != (want.perNode != "") {
		fail("NODE_NAME from spec.nodeName: %v, want %v (per-node configs: %q)", nodeName, !nodeName, want.perNode)
	}
	if _, ok := want.env["GPUCTK_CONFIG"]; !ok && slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GPUCTK_CONFIG" }) {
		fail("GPUCTK_CONFIG beside GPUCTK_CONFIG_DIR: the plugin refuses both")
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for path, host := range want.mounts {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == path })
		if i < 0 {
			fail("nothing mounted at %s", path)
			continue
		}
		m := c.VolumeMounts[i]
		v := volumes[m.Name]
		switch {
		case host == "" && (v.ConfigMap == nil || v.ConfigMap.Name != cm.Name):
			fail("%s: want the ConfigMap %s, got volume %+v", path, cm.Name, v)
		case host == "emptyDir" && (v.EmptyDir == nil || m.ReadOnly):
			fail("%s: want a writable emptyDir, got volume %+v", path, v)
		case host == "projected" && !tokenVolume(v):
			fail("%s: want a projected volume of the service account's token and kube-root-ca.crt's ca.crt, got %+v", path, v)
		case host != "" && host != "emptyDir" && host != "projected" && (v.HostPath == nil || v.HostPath.Path != host):
			fail("%s: want host path %s, got volume %+v", path, host, v)
		}
		if want, ok := want.propagation[path]; ok && (m.MountPropagation == nil || *m.MountPropagation != want) {
			fail("%s: mount propagation %v, want %s", path, m.MountPropagation, want)
		}
		if path == "/driver-root" && !m.ReadOnly {
			fail("the driver root is mounted read-write")
		}
	}
	if len(c.VolumeMounts) != len(want.mounts) {
		fail("%d mounts, want %d: %+v", len(c.VolumeMounts), len(want.mounts), c.VolumeMounts)
	}
	if cfg, ok := want.env["GPUCTK_CONFIG"]; ok && cm.Data[strings.TrimPrefix(cfg, "/etc/gpuctk/")] == "" {
		fail("the ConfigMap %s has no %s, which GPUCTK_CONFIG names", cm.Name, cfg)
	}
	if d := want.perNode; d != "" && cm.Data[d] == "" && cm.Data[d+".toml"] == "" {
		fail("the ConfigMap %s has neither %s nor %s.toml, which GPUCTK_CONFIG_DEFAULT names", cm.Name, d, d)
	}
}

// tokenVolume reports whether v gives what automounting would: a token
// the kubelet rotates and the cluster's CA, where the plugin reads them.
func tokenVolume(v corev1.Volume) bool {
	if v.Projected == nil {
		return false
	}
	var token, ca bool
	for _, s := range v.Projected.Sources {
		if t := s.ServiceAccountToken; t != nil && t.Path == "token" {
			token = true
		}
		if c := s.ConfigMap; c != nil && c.Name == "kube-root-ca.crt" && slices.Contains(c.Items, corev1.KeyToPath{Key: "ca.crt", Path: "ca.crt"}) {
			ca = true
		}
	}
	return token && ca
}

// checkRBAC: per-node configs bind gpuctk-device-plugin's service account
// to get on nodes and nothing more; without them there is no RBAC.
func checkRBAC(t *testing.T, objects map[string]any, perNode bool) {
	t.Helper()
	names := []string{"ServiceAccount/gpuctk-device-plugin", "ClusterRole/gpuctk-device-plugin", "ClusterRoleBinding/gpuctk-device-plugin"}
	if !perNode {
		for _, n := range names {
			if _, ok := objects[n]; ok {
				t.Errorf("%s without per-node configs: the plugin reads no Kubernetes API", n)
			}
		}
		return
	}
	sa, ok1 := objects[names[0]].(*corev1.ServiceAccount)
	role, ok2 := objects[names[1]].(*rbacv1.ClusterRole)
	binding, ok3 := objects[names[2]].(*rbacv1.ClusterRoleBinding)
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("per-node configs without %q", names)
	}
	if sa.Namespace != "gpuctk" || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount %s/%s automounts its token: %+v", sa.Namespace, sa.Name, sa.AutomountServiceAccountToken)
	}
	getNodes := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}
	if !slices.EqualFunc(role.Rules, getNodes, func(a, b rbacv1.PolicyRule) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		t.Errorf("ClusterRole rules %+v, want get on nodes only", role.Rules)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}) || !slices.Equal(binding.Subjects, want) {
		t.Errorf("ClusterRoleBinding %+v %+v does not bind %s to %s", binding.RoleRef, binding.Subjects, sa.Name, role.Name)
	}
}

// gpuNodeSelected reports whether a pod lands on a node that Node Feature
// Discovery labelled as having an NVIDIA PCI device, and nothing else.
func gpuNodeSelected(pod corev1.PodSpec, more map[string]string) bool {
	labels := map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}
	maps.Copy(labels, more)
	for k, v := range pod.NodeSelector {
		if labels[k] != v {
			return false
		}
	}
	if pod.Affinity == nil || pod.Affinity.NodeAffinity == nil || pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchFields) == 0 && len(term.MatchExpressions) > 0 &&
			!slices.ContainsFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
				return e.Operator != corev1.NodeSelectorOpIn || !slices.Contains(e.Values, labels[e.Key])
			}) {
			return true
		}
	}
	return false
}

// image is the image the shipped manifests and the chart's defaults name:
// the chart's image.repository (which mk/image.mk reads for make image)
// and its appVersion.
func image(t *testing.T) string {
	t.Helper()
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	for path, v := range map[string]any{"../helm/gpuctk/values.yaml": &values, "../helm/gpuctk/Chart.yaml": &chart} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if values.Image.Repository == "" || chart.AppVersion == "" || values.Image.Tag != "" {
		t.Fatalf("the chart's image.repository %q, appVersion %q, image.tag %q: want the first two set and no tag", values.Image.Repository, chart.AppVersion, values.Image.Tag)
	}
	return values.Image.Repository + ":" + chart.AppVersion
}

// TestImage: make image names the image as the manifests and the chart
// do (the repository from one place, the chart's values), and the
// manifests name the chart's appVersion.
func TestImage(t *testing.T) {
	want := image(t)
	for _, f := range []string{"device-plugin.yaml", "mps/mps-daemon.yaml"} {
		var ds appsv1.DaemonSet
		decode(t, f, &ds)
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("%s: image %q, want %q (the chart's image.repository:appVersion)", f, got, want)
		}
	}
	out, err := exec.Command("make", "-s", "-C", "../..", "--no-print-directory", "print-image", "IMAGE_TAG="+strings.SplitN(want, ":", 2)[1]).CombinedOutput()
	if err != nil {
		t.Fatalf("make print-image: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("make image names the image %q, want %q", got, want)
	}
	out, err = exec.Command("make", "-s", "-C", "../..", "--no-print-directory", "print-image", "REGISTRY=registry.example.com:5000/team", "IMAGE_TAG=1.2.3").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "registry.example.com:5000/team/gpuctk:1.2.3" {
		t.Errorf("make print-image REGISTRY=registry.example.com:5000/team IMAGE_TAG=1.2.3: %q (%v), want registry.example.com:5000/team/gpuctk:1.2.3", out, err)
	}
}

// TestPluginMakesMPSMountPoints: the plugin makes each MPS device's pipe
// and /dev/shm folders under the state root before it writes a spec that
// mounts them (mps.MountPoints), so that before any daemon ran (a fresh
// boot, the mps component's pod not started yet) a pod gets the hook's
// message rather than a missing mount source. The state root must be
// mounted read-write there: read-only, the plugin exits with "mkdir
// /run/gpuctk/mps/GPU-...: read-only file system" whenever an MPS device
// is configured and its daemon has not made them yet.
func TestPluginMakesMPSMountPoints(t *testing.T) {
	var ds appsv1.DaemonSet
	decode(t, "device-plugin.yaml", &ds)
	root := config.Default().MPS.StateRoot
	c := ds.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == root })
	if i < 0 {
		t.Fatalf("nothing mounted at the MPS state root %s", root)
	}
	if c.VolumeMounts[i].ReadOnly {
		t.Errorf("the MPS state root %s is mounted read-only: the plugin cannot make the MPS devices' mount points", root)
	}
}

// TestMPSHostPID: gpuctk tells an MPS daemon from a socket a tenant
// planted by the socket's peer, SO_PEERCRED's pid, whose mount namespace
// it reads under /proc and compares, with the pid, to what `gpuctk mps`
// recorded. The kernel gives that pid in the reader's PID namespace, 0
// where the daemon is not in it. So the mps component must run the
// daemons in the host's PID namespace (the pid it records is the one the
// hook's mps-check, on the host, sees), and the device plugin must read
// pids there: in a pod's own namespace every MPS replica would be
// Unhealthy ("its listener (pid 0): ... no such file or directory") and
// every MPS container refused by the hook. Without MPS nothing needs the
// host's pids: the base manifests leave them out, the mps and mps-host
// components put them in.
func TestMPSHostPID(t *testing.T) {
	for file, want := range map[string]map[string]bool{
		"kustomize.yaml":     {"gpuctk-device-plugin": false},
		"kustomize-mps.yaml": {"gpuctk-device-plugin": true, "gpuctk-mps": true},
		"helm.yaml":          {"gpuctk-device-plugin": false},
		"helm-mps.yaml":      {"gpuctk-device-plugin": true, "gpuctk-mps": true},
	} {
		objects := rendered(t, file)
		for name, hostPID := range want {
			if ds := objects["DaemonSet/"+name].(*appsv1.DaemonSet); ds.Spec.Template.Spec.HostPID != hostPID {
				t.Errorf("%s: %s has hostPID %v, want %v", file, name, ds.Spec.Template.Spec.HostPID, hostPID)
			}
		}
	}
	var patch appsv1.DaemonSet
	decode(t, "mps-host/plugin-host-pid.yaml", &patch)
	if patch.Name != "gpuctk-device-plugin" || !patch.Spec.Template.Spec.HostPID {
		t.Errorf("the mps-host component does not put gpuctk-device-plugin in the host's PID namespace: %+v", patch)
	}
}

// TestDriverContainerDocs: a driver installed in a container (the GPU
// operator's) is at /run/nvidia/driver on the host. The plugin sees it at
// /driver-root whatever the host path, but the spec it writes is for the
// host's runtime: its mounts are --host-driver-root plus each file's path.
// Where the instructions change only the volume's hostPath, the spec
// names /usr/lib/x86_64-linux-gnu/libcuda.so... on the host, which has no
// driver there, and every GPU container fails on its mounts ("no such
// file or directory"). Each place that tells a user to point the volume
// at /run/nvidia/driver must say to pass the same path as
// --host-driver-root.
func TestDriverContainerDocs(t *testing.T) {
	for _, f := range []string{"README.md", "device-plugin.yaml", "mps/mps-daemon.yaml", "../helm/gpuctk/templates/device-plugin.yaml", "../helm/gpuctk/values.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Paragraphs of the README, comment blocks of a manifest.
		var blocks []string
		block := ""
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasSuffix(f, ".yaml") {
				var ok bool
				if line, ok = strings.CutPrefix(line, "#"); !ok {
					line = ""
				}
			}
			if strings.TrimSpace(line) == "" {
				blocks, block = append(blocks, block), ""
				continue
			}
			block += " " + strings.TrimSpace(line)
		}
		for _, b := range append(blocks, block) {
			if !strings.Contains(b, "/run/nvidia/driver") || !strings.Contains(b, "containerised driver") && !strings.Contains(b, "driver installed in a container") {
				continue
			}
			if !strings.Contains(b, "--host-driver-root /run/nvidia/driver") {
				t.Errorf("%s:%s\nsays where a containerised driver is without --host-driver-root /run/nvidia/driver: the spec's mounts would name the host's /usr/lib/...", f, b)
			}
		}
	}
}
