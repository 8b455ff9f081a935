package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuctk/gpuctk/config"
)

// kustomization is the part of kustomize's types the test checks.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Patch string `json:"patch"`
	} `json:"patches,omitempty"`
}

// decode reads a manifest strictly: an unknown or misspelt field fails.
func decode(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("\n---")) {
		t.Fatalf("%s: one object per file, so kustomization.yaml lists each", path)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestManifests decodes every manifest the kustomizations list with the
// Kubernetes API types, strictly, and checks that none is left unlisted.
func TestManifests(t *testing.T) {
	objects := map[string]any{}
	for _, dir := range []string{".", "mps", "dra"} {
		var k kustomization
		decode(t, filepath.Join(dir, "kustomization.yaml"), &k)
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range files {
			if filepath.Base(f) != "kustomization.yaml" && !slices.Contains(k.Resources, filepath.Base(f)) {
				t.Errorf("%s is not listed in %s/kustomization.yaml", f, dir)
			}
		}
		for _, r := range k.Resources {
			p := filepath.Join(dir, r)
			var meta struct {
				Kind string `json:"kind"`
			}
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(data, &meta); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			var obj any
			switch meta.Kind {
			case "Namespace":
				obj = &corev1.Namespace{}
			case "ConfigMap":
				obj = &corev1.ConfigMap{}
			case "RuntimeClass":
				obj = &nodev1.RuntimeClass{}
			case "DaemonSet":
				obj = &appsv1.DaemonSet{}
			case "DeviceClass":
				obj = &resourceapi.DeviceClass{}
			case "ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "ClusterRole":
				obj = &rbacv1.ClusterRole{}
			case "ClusterRoleBinding":
				obj = &rbacv1.ClusterRoleBinding{}
			default:
				t.Fatalf("%s: kind %q has no check here", p, meta.Kind)
			}
			decode(t, p, obj)
			objects[p] = obj
		}
	}

	rc := objects["runtimeclass.yaml"].(*nodev1.RuntimeClass)
	if rc.Name != "nvidia" || rc.Handler != "nvidia" {
		t.Errorf("RuntimeClass %q with handler %q, want nvidia and nvidia", rc.Name, rc.Handler)
	}
	cm := objects["configmap.yaml"].(*corev1.ConfigMap)
	if !strings.Contains(cm.Data["config.toml"], "[kubernetes]") {
		t.Errorf("ConfigMap %s has no config.toml with [kubernetes]", cm.Name)
	}

	for _, tc := range []struct {
		file    string
		command []string
		mounts  map[string]string // mount path -> host path ("" for the ConfigMap)
		// propagation is the mount propagation a mount path needs. The
		// host's / at /driver-root is HostToContainer: without it the pod
		// keeps a private copy of every host mount of its start (another
		// pod's volume the host unmounts stays mounted in it) and never
		// sees a driver root mounted later (/run/nvidia/driver).
		propagation map[string]corev1.MountPropagationMode
		env         map[string]string
	}{
		{
			file: "device-plugin.yaml",
			command: []string{"/usr/bin/gpuctk-device-plugin", "--driver-root", "/driver-root", "--host-driver-root", "/", "--dev-root", "/",
				"--hook-dir", "/var/lib/gpuctk/bin", "--labels-dir", "/etc/kubernetes/node-feature-discovery/features.d"},
			mounts: map[string]string{"/var/lib/kubelet/device-plugins": "/var/lib/kubelet/device-plugins",
				"/var/run/cdi": "/var/run/cdi", "/etc/gpuctk": "", "/driver-root": "/", "/dev": "/dev", "/run/gpuctk/mps": "/run/gpuctk/mps",
				// The hook's host folder at the same path, as the spec names it.
				"/var/lib/gpuctk/bin": "/var/lib/gpuctk/bin", "/etc/kubernetes/node-feature-discovery/features.d": "/etc/kubernetes/node-feature-discovery/features.d"},
			propagation: map[string]corev1.MountPropagationMode{"/run/gpuctk/mps": corev1.MountPropagationHostToContainer,
				"/driver-root": corev1.MountPropagationHostToContainer},
			env: map[string]string{"GPUCTK_CONFIG": "/etc/gpuctk/config.toml", "GPUCTK_KUBELET_DIR": "/var/lib/kubelet/device-plugins", "GPUCTK_CDI_DIR": "/var/run/cdi"},
		},
		{
			file:    "mps/mps-daemon.yaml",
			command: []string{"/usr/bin/gpuctk", "mps", "run", "--driver-root", "/driver-root"},
			mounts:  map[string]string{"/run/gpuctk/mps": "/run/gpuctk/mps", "/etc/gpuctk": "", "/driver-root": "/", "/dev": "/dev"},
			propagation: map[string]corev1.MountPropagationMode{"/run/gpuctk/mps": corev1.MountPropagationBidirectional,
				"/driver-root": corev1.MountPropagationHostToContainer},
			env: map[string]string{"GPUCTK_CONFIG": "/etc/gpuctk/config.toml"},
		},
		{
			file:    "dra/dra-driver.yaml",
			command: []string{"/usr/bin/gpuctk-dra", "--driver-root", "/driver-root", "--host-driver-root", "/", "--dev-root", "/"},
			mounts: map[string]string{"/var/lib/kubelet/plugins": "/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry": "/var/lib/kubelet/plugins_registry",
				"/var/lib/kubelet/device-plugins": "/var/lib/kubelet/device-plugins",
				"/var/run/cdi":                    "/var/run/cdi", "/etc/gpuctk": "", "/driver-root": "/", "/dev": "/dev", "/run/gpuctk/mps": "/run/gpuctk/mps"},
			propagation: map[string]corev1.MountPropagationMode{"/run/gpuctk/mps": corev1.MountPropagationHostToContainer,
				"/driver-root": corev1.MountPropagationHostToContainer},
			env: map[string]string{"GPUCTK_CONFIG": "/etc/gpuctk/config.toml", "GPUCTK_CDI_DIR": "/var/run/cdi"},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ds := objects[tc.file].(*appsv1.DaemonSet)
			pod := ds.Spec.Template.Spec
			if got := pod.NodeSelector["nvidia.com/gpu.present"]; got != "true" {
				t.Errorf("nodeSelector nvidia.com/gpu.present = %q, want \"true\"", got)
			}
			if !slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
				return tl.Key == "nvidia.com/gpu" && tl.Effect == corev1.TaintEffectNoSchedule && tl.Operator == corev1.TolerationOpExists
			}) {
				t.Errorf("no toleration for nvidia.com/gpu NoSchedule: %+v", pod.Tolerations)
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			if c.Image != "gpuctk/gpuctk:VERSION" {
				t.Errorf("image %q, want gpuctk/gpuctk:VERSION (make image's name)", c.Image)
			}
			if got := append(slices.Clone(c.Command), c.Args...); !slices.Equal(got, tc.command) {
				t.Errorf("command %q, want %q", got, tc.command)
			}
			if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
				t.Errorf("container is not privileged: it needs the GPUs' device nodes")
			}
			for k, v := range tc.env {
				if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == k && e.Value == v }) {
					t.Errorf("no env %s=%s: %+v", k, v, c.Env)
				}
			}
			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = v
			}
			for path, host := range tc.mounts {
				i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == path })
				if i < 0 {
					t.Errorf("nothing mounted at %s", path)
					continue
				}
				m := c.VolumeMounts[i]
				v := volumes[m.Name]
				switch {
				case host == "" && (v.ConfigMap == nil || v.ConfigMap.Name != cm.Name):
					t.Errorf("%s: want the ConfigMap %s, got volume %+v", path, cm.Name, v)
				case host != "" && (v.HostPath == nil || v.HostPath.Path != host):
					t.Errorf("%s: want host path %s, got volume %+v", path, host, v)
				}
				if want, ok := tc.propagation[path]; ok && (m.MountPropagation == nil || *m.MountPropagation != want) {
					t.Errorf("%s: mount propagation %v, want %s", path, m.MountPropagation, want)
				}
				if path == "/driver-root" && !m.ReadOnly {
					t.Errorf("the driver root is mounted read-write")
				}
			}
		})
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
// every MPS container refused by the hook.
func TestMPSHostPID(t *testing.T) {
	for _, f := range []string{"device-plugin.yaml", "mps/mps-daemon.yaml"} {
		var ds appsv1.DaemonSet
		decode(t, f, &ds)
		if !ds.Spec.Template.Spec.HostPID {
			t.Errorf("%s: hostPID is not true: MPS daemons' pids would not be seen where they are checked", f)
		}
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
	for _, f := range []string{"README.md", "device-plugin.yaml"} {
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
