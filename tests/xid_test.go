package tests

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pb "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
)

// registrar stands in for the kubelet's registration service.
type registrar struct {
	pb.UnimplementedRegistrationServer
	mu        sync.Mutex
	endpoints map[string]string
}

func (r *registrar) Register(_ context.Context, req *pb.RegisterRequest) (*pb.Empty, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endpoints[req.ResourceName] = req.Endpoint
	return &pb.Empty{}, nil
}

// TestNVMLXIDHealth runs the shipped device plugin on its NVML path (the
// fake libnvidia-ml.so.1 in a fake driver root) and injects XID events
// through the library: an application XID (13) leaves the GPU Healthy, a
// critical one (79, fallen off the bus) makes ListAndWatch send it
// Unhealthy, and it is sent Healthy again after --xid-recovery.
func TestNVMLXIDHealth(t *testing.T) {
	p, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	root, hostFile := nvmlRoot(t, p)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	logs, stream := runPlugin(t, "nvidia.com/gpu", []string{fakenvml.EnvVar + "=" + hostFile},
		"--config", cfg, "--driver-root", root, "--cdi-dir", t.TempDir(), "--health-interval", "100ms", "--xid-recovery", "2s")
	// health reads ListAndWatch until GPU 2's health is want, and returns
	// the health of every device then.
	health := func(want string) map[string]string {
		t.Helper()
		for {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for GPU 2 %s: %v", want, err)
			}
			out := map[string]string{}
			for _, d := range resp.Devices {
				out[d.ID] = d.Health
			}
			if out["2"] == want {
				return out
			}
		}
	}
	if h := health(pb.Healthy); len(h) != 8 {
		t.Fatalf("ListAndWatch sent %d devices, want 8: %v", len(h), h)
	}
	// Events are delivered in order: by the time the critical one on GPU 2
	// shows, the application one on GPU 1 has been seen.
	if err := fakenvml.AppendXID(hostFile, 1, 13, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := fakenvml.AppendXID(hostFile, 2, 79, -1, -1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h := health(pb.Unhealthy)
	t.Logf("critical XID to Unhealthy: %v", time.Since(start).Round(time.Millisecond))
	for id, s := range h {
		if id != "2" && s != pb.Healthy {
			t.Errorf("device %s is %s after XIDs on GPUs 1 (application) and 2: want Healthy", id, s)
		}
	}
	health(pb.Healthy)
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("GPU 2 Healthy again after %v, before --xid-recovery 2s", d)
	}
	if !strings.Contains(logs.String(), "application XID") {
		t.Errorf("the application XID was not logged")
	}
}

// runPlugin runs the shipped device plugin with args and env, and a
// stand-in kubelet, until the test ends (its log shown if the test
// failed), and returns its log and the ListAndWatch stream of resource
// once the plugin registered it.
func runPlugin(t *testing.T, resource string, env []string, args ...string) (*lockedBuffer, pb.DevicePlugin_ListAndWatchClient) {
	t.Helper()
	kubeletDir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(kubeletDir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	reg := &registrar{endpoints: map[string]string{}}
	srv := grpc.NewServer()
	pb.RegisterRegistrationServer(srv, reg)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	cmd := exec.Command(bin("gpuctk-device-plugin"), append([]string{"--kubelet-dir", kubeletDir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	// The plugin writes while the test reads.
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("plugin log:\n%s", logs.String())
		}
	})
	var endpoint string
	for deadline := time.Now().Add(20 * time.Second); endpoint == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		reg.mu.Lock()
		endpoint = reg.endpoints[resource]
		reg.mu.Unlock()
	}
	if endpoint == "" {
		t.Fatalf("%s was not registered", resource)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(kubeletDir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := pb.NewDevicePluginClient(conn).ListAndWatch(ctx, &pb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return logs, stream
}

// lockedBuffer is a buffer a child process writes into while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
