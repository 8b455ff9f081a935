package dra

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/nodespec"
)

// kubeletDirs are a test's stand-ins for the kubelet's folders.
type kubeletDirs struct{ cdi, plugin, registrar, devicePlugins string }

func newKubeletDirs(t *testing.T) kubeletDirs {
	// Short paths: a Unix socket's path holds 107 bytes.
	root, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	d := kubeletDirs{filepath.Join(root, "cdi"), filepath.Join(root, "p"), filepath.Join(root, "reg"), filepath.Join(root, "dp")}
	for _, dir := range []string{d.registrar, d.devicePlugins} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// start runs the plugin for a simulated l40s host until the test ends or
// stop is called; stop returns Run's error.
func start(t *testing.T, dirs kubeletDirs, client *fake.Clientset) (stop func() error) {
	return startWithConfig(t, dirs, client, "")
}

// startWithConfig is start with a configuration file, reloaded when it
// changes ("": the defaults).
func startWithConfig(t *testing.T, dirs kubeletDirs, client *fake.Clientset, configPath string) (stop func() error) {
	t.Helper()
	load := func() (*nodespec.Node, error) {
		cfg := config.Default()
		if configPath != "" {
			var err error
			if cfg, err = nodespec.Config(configPath, true, nil); err != nil {
				return nil, err
			}
		}
		return nodespec.Load(cfg, "l40s", false, slog.New(slog.DiscardHandler))
	}
	p := New(DefaultName, "node-a", client, load, WithCDIDir(dirs.cdi), WithPluginDir(dirs.plugin),
		WithRegistrarDir(dirs.registrar), WithDevicePluginDir(dirs.devicePlugins), WithConfigPath(configPath))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return 10 s after its context ended")
			return nil
		}
	}
	t.Cleanup(func() { stop() })
	// Serving once the registration socket answers.
	reg := filepath.Join(dirs.registrar, DefaultName+"-reg.sock")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("Run: %v", err)
		default:
		}
		if c, err := net.Dial("unix", reg); err == nil {
			c.Close()
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("no registration socket %s after 20 s", reg)
		}
	}
}

func dial(t *testing.T, sock string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestKubeletSide drives the driver as the kubelet does: plugin
// registration, then NodePrepareResources for an allocated claim, a
// driver restart, and NodeUnprepareResources (twice) from the restarted
// driver; the claim's CDI names are those of the spec written, and the
// checkpoint holds the claim while it is prepared. The node's devices are
// published as ResourceSlices.
func TestKubeletSide(t *testing.T) {
	dirs := newKubeletDirs(t)
	c := claim("claim-uid-1", "gpu", []string{"gpu-0"})
	c.Status.Allocation.Devices.Results[0].Pool = "node-a"
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid"}}, c)
	stop := start(t, dirs, client)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(dial(t, filepath.Join(dirs.registrar, DefaultName+"-reg.sock"))).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	dra := filepath.Join(dirs.plugin, "dra.sock")
	if info.Type != registerapi.DRAPlugin || info.Name != DefaultName || info.Endpoint != dra || !strings.Contains(strings.Join(info.SupportedVersions, " "), drapb.DRAPluginService) {
		t.Errorf("registration info %+v, want a DRA plugin %s at %s speaking %s", info, DefaultName, dra, drapb.DRAPluginService)
	}
	// The names prepared claims get are the spec's.
	data, err := os.ReadFile(filepath.Join(dirs.cdi, "nvidia.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Kind != "nvidia.com/gpu" || len(spec.Devices) == 0 || spec.Devices[0].Name != "0" {
		t.Errorf("spec written: kind %s, devices %+v; want nvidia.com/gpu, 0 first", spec.Kind, spec.Devices)
	}

	req := &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: "gpu", UID: "claim-uid-1"}}}
	resp, err := drapb.NewDRAPluginClient(dial(t, dra)).NodePrepareResources(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Claims["claim-uid-1"]
	if got == nil || got.Error != "" || len(got.Devices) != 1 || strings.Join(got.Devices[0].CDIDeviceIDs, " ") != "nvidia.com/gpu=0" || got.Devices[0].DeviceName != "gpu-0" {
		t.Fatalf("NodePrepareResources: %+v, want gpu-0 as nvidia.com/gpu=0", resp.Claims)
	}
	checkpointHas(t, dirs, "claim-uid-1", true)

	// Published: the l40s's four GPUs in the node's pool.
	waitPublished(t, client, "gpu-0 gpu-1 gpu-2 gpu-3")

	// Restarted: the new driver unprepares what the old one prepared.
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	start(t, dirs, client)
	client2 := drapb.NewDRAPluginClient(dial(t, dra))
	for range 2 {
		uresp, err := client2.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req.Claims})
		if err != nil {
			t.Fatal(err)
		}
		if r := uresp.Claims["claim-uid-1"]; r == nil || r.Error != "" {
			t.Fatalf("NodeUnprepareResources: %+v", uresp.Claims)
		}
		checkpointHas(t, dirs, "claim-uid-1", false)
	}
}

// waitPublished waits for the node's pool to list the devices want
// (names, space-separated), 20 s at most.
func waitPublished(t *testing.T, client *fake.Clientset, want string) {
	t.Helper()
	var names []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		slices, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names = nil
		for _, s := range slices.Items {
			if s.Spec.Driver == DefaultName && s.Spec.Pool.Name == "node-a" && s.Spec.NodeName != nil && *s.Spec.NodeName == "node-a" {
				for _, d := range s.Spec.Devices {
					names = append(names, d.Name)
				}
			}
		}
		if strings.Join(names, " ") == want {
			return
		}
	}
	t.Fatalf("published devices %q, want %s", names, want)
}

// TestReload: a configuration change republishes the devices (GPU 0
// shared in two replicas); a bad one keeps the last good devices. The
// file is replaced whole, as a ConfigMap update or an editor does: one
// rewritten in place is read empty, the defaults, while it is written.
func TestReload(t *testing.T) {
	dirs := newKubeletDirs(t)
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid"}})
	startWithConfig(t, dirs, client, cfgPath)
	waitPublished(t, client, "gpu-0 gpu-1 gpu-2 gpu-3")
	shared := "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"
	if err := atomicfile.WriteFile(cfgPath, []byte(shared), 0o644); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, client, "gpu-0-replica-0 gpu-0-replica-1 gpu-1 gpu-2 gpu-3")
	if err := atomicfile.WriteFile(cfgPath, []byte("[[sharing]]\ndevices = [\"9\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	waitPublished(t, client, "gpu-0-replica-0 gpu-0-replica-1 gpu-1 gpu-2 gpu-3")
}

func checkpointHas(t *testing.T, dirs kubeletDirs, uid string, want bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dirs.plugin, CheckpointName))
	if err != nil {
		t.Fatal(err)
	}
	var c checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Claims[types.UID(uid)]; ok != want {
		t.Errorf("checkpoint has claim %s: %v, want %v\n%s", uid, ok, want, data)
	}
}

// TestRefusedBesideDevicePlugin: while gpuctk-device-plugin serves the
// node (its socket answers), the driver does not start.
func TestRefusedBesideDevicePlugin(t *testing.T) {
	dirs := newKubeletDirs(t)
	sock := filepath.Join(dirs.devicePlugins, "gpuctk-nvidia.com_gpu.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := New(DefaultName, "node-a", fake.NewClientset(), func() (*nodespec.Node, error) { t.Fatal("loaded the host"); return nil, nil },
		WithCDIDir(dirs.cdi), WithPluginDir(dirs.plugin), WithRegistrarDir(dirs.registrar), WithDevicePluginDir(dirs.devicePlugins))
	err = p.Run(context.Background())
	want := "gpuctk-device-plugin serves this node's GPUs (its socket " + sock + " answers): run the device plugin or the DRA driver on a node, not both"
	if err == nil || err.Error() != want {
		t.Errorf("Run: %v\nwant: %s", err, want)
	}
}
