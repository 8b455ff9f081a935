package deviceplugin

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	pb "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// kubelet is a registration server standing in for the kubelet's. As the
// kubelet does, it dials each plugin that registers and keeps one
// ListAndWatch stream open per resource, the latest registration's.
type kubelet struct {
	pb.UnimplementedRegistrationServer
	dir     string
	mu      sync.Mutex
	regs    []*pb.RegisterRequest
	clients map[string]*grpc.ClientConn
	srv     *grpc.Server
}

func newKubelet(dir string) *kubelet {
	k := &kubelet{dir: dir, srv: grpc.NewServer(), clients: map[string]*grpc.ClientConn{}}
	pb.RegisterRegistrationServer(k.srv, k)
	return k
}

func (k *kubelet) Register(_ context.Context, r *pb.RegisterRequest) (*pb.Empty, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	if _, err := pb.NewDevicePluginClient(conn).GetDevicePluginOptions(context.Background(), &pb.Empty{}); err != nil {
		conn.Close()
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.regs = append(k.regs, r)
	if old := k.clients[r.ResourceName]; old != nil {
		old.Close()
	}
	k.clients[r.ResourceName] = conn
	go func() {
		stream, err := pb.NewDevicePluginClient(conn).ListAndWatch(context.Background(), &pb.Empty{})
		for err == nil {
			_, err = stream.Recv()
		}
	}()
	return &pb.Empty{}, nil
}

// drop closes the kubelet's client of resource, as a kubelet does whose
// ListAndWatch stream failed.
func (k *kubelet) drop(resource string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.clients[resource]; c != nil {
		c.Close()
		delete(k.clients, resource)
	}
}

// stop ends the kubelet: its server and its clients.
func (k *kubelet) stop() {
	k.srv.Stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, c := range k.clients {
		c.Close()
		delete(k.clients, name)
	}
}

func (k *kubelet) registered() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, r := range k.regs {
		out = append(out, r.ResourceName+" "+r.Endpoint)
	}
	return out
}

func startKubelet(t *testing.T, dir string) *kubelet {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := newKubelet(dir)
	go k.srv.Serve(l)
	t.Cleanup(k.stop)
	return k
}

// loader resolves a simulated profile under the config file at path.
func loader(profile, path string) Loader { return loaderOf(profile, path, true) }

// loaderOf is loader; without explicit a missing file means the defaults,
// as for the plugin's default --config.
func loaderOf(profile, path string, explicit bool) Loader {
	return func() (*State, error) {
		cfg, err := config.LoadWatched(path, explicit)
		if err != nil {
			return nil, err
		}
		p, err := inventory.LoadProfile(profile)
		if err != nil {
			return nil, err
		}
		h, err := p.Host()
		if err != nil {
			return nil, err
		}
		set, err := offer.Resolve(h, cfg)
		if err != nil {
			return nil, err
		}
		spec, kind, sum, err := cdi.Build(set, driver.Standard(h.DriverVersion, p.UVMMajor, p.CapsMajor), cfg, "yaml")
		if err != nil {
			return nil, err
		}
		return NewState(cfg, set, spec, kind, sum.Capabilities, true)
	}
}

var quiet = slog.New(slog.DiscardHandler)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// waitServing waits until the plugin listens on sock. The socket's file
// is there from bind(2) on, before listen(2): a connection in between is
// refused.
func waitServing(t *testing.T, sock string) {
	t.Helper()
	waitFor(t, "the plugin's socket", func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func dial(t *testing.T, sock string) pb.DevicePluginClient {
	t.Helper()
	c, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return pb.NewDevicePluginClient(c)
}

const sharedConfig = `
[kubernetes]
mig-strategy = "mixed"
rename-shared = true
device-list-strategy = ["cdi-cri", "cdi-annotations", "envvar"]
[[sharing]]
devices = ["0"]
strategy = "time-slicing"
replicas = 2
[[sharing]]
devices = ["1"]
strategy = "mps"
replicas = 2
resource = "nvidia.com/gpu-mps"
`

// TestPlugin runs the plugin against a stand-in kubelet: registration per
// resource, ListAndWatch, Allocate, a config reload (good and bad) and a
// kubelet restart.
func TestPlugin(t *testing.T) {
	dir, cdiDir := t.TempDir(), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, dir)
	p := New(loader("dgx-a100", cfgPath), WithKubeletDir(dir), WithCDIDir(cdiDir), WithConfigPath(cfgPath), WithLogger(quiet))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "gpuctk-*")); len(m) != 0 {
			t.Errorf("sockets left after shutdown: %v", m)
		}
	})
	waitFor(t, "6 registrations", func() bool { return len(k.registered()) == 6 })
	if got := strings.Join(k.registered(), "\n"); !strings.Contains(got, "nvidia.com/gpu.shared gpuctk-nvidia.com_gpu.shared.sock") {
		t.Errorf("registrations:\n%s", got)
	}

	// The spec written is the one cdi generate writes.
	want, err := loader("dgx-a100", cfgPath)()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(cdiDir, "nvidia.yaml")); err != nil || string(got) != string(want.Spec) {
		t.Errorf("spec in cdi dir differs from cdi.Build's (err %v)", err)
	}

	shared := dial(t, filepath.Join(dir, "gpuctk-nvidia.com_gpu.shared.sock"))
	stream, err := shared.ListAndWatch(ctx, &pb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(t, stream); !reflect.DeepEqual(got, []string{"0::0", "0::1"}) {
		t.Errorf("ListAndWatch sent %v", got)
	}
	resp, err := shared.Allocate(ctx, &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: []string{"0::1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.ContainerResponses[0]
	if len(c.CdiDevices) != 1 || c.CdiDevices[0].Name != "nvidia.com/gpu=0::1" ||
		c.Envs["NVIDIA_VISIBLE_DEVICES"] != "0::1" ||
		c.Annotations["cdi.k8s.io/gpuctk_nvidia.com_gpu.shared"] != "nvidia.com/gpu=0::1" {
		t.Errorf("Allocate answered %v", c)
	}

	for _, tc := range []struct{ sock, id, err string }{
		{"gpuctk-nvidia.com_gpu.shared.sock", "0", `resource nvidia.com/gpu.shared: device "0" is not advertised`},
		{"gpuctk-nvidia.com_gpu-mps.sock", "1::0,1::1", "resource nvidia.com/gpu-mps: 2 devices requested but config " + cfgPath + ": [[sharing]] entry 2 sets fail-requests-greater-than-one"},
	} {
		_, err := dial(t, filepath.Join(dir, tc.sock)).Allocate(ctx, &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: strings.Split(tc.id, ",")}}})
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Allocate %s: %v, want %q", tc.id, err, tc.err)
		}
	}

	// A good reload changes what ListAndWatch sends without a restart.
	writeAtomic(t, cfgPath, strings.Replace(sharedConfig, "replicas = 2\n[[sharing]]", "replicas = 3\n[[sharing]]", 1))
	if got := ids(t, stream); !reflect.DeepEqual(got, []string{"0::0", "0::1", "0::2"}) {
		t.Errorf("after reload ListAndWatch sent %v", got)
	}
	// A bad one keeps the last good state, spec included.
	before, _ := os.ReadFile(filepath.Join(cdiDir, "nvidia.yaml"))
	writeAtomic(t, cfgPath, strings.Replace(sharedConfig, "replicas = 2", "replicas = 1", 1))
	time.Sleep(300 * time.Millisecond)
	if after, _ := os.ReadFile(filepath.Join(cdiDir, "nvidia.yaml")); string(after) != string(before) {
		t.Error("a bad reload changed the spec")
	}
	if _, err := shared.Allocate(ctx, &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: []string{"0::2"}}}}); err != nil {
		t.Errorf("after a bad reload: %v", err)
	}

	// A restarted kubelet (a new kubelet.sock) gets every resource again,
	// even one that binds its socket well before it listens on it (the
	// plugin's first tries are refused).
	k.stop()
	os.Remove(filepath.Join(dir, "kubelet.sock"))
	k2 := startKubeletLate(t, dir, 300*time.Millisecond)
	waitFor(t, "registrations with the new kubelet", func() bool { return len(k2.registered()) == 6 })
}

const sharedL40S = `
[kubernetes]
rename-shared = true
[[sharing]]
devices = ["0"]
strategy = "time-slicing"
replicas = 2
`

// runPlugin runs p until the test ends, and returns a ListAndWatch stream
// of resource's socket in dir.
func runPlugin(t *testing.T, p *Plugin, dir, resource string) pb.DevicePlugin_ListAndWatchClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	sock := filepath.Join(dir, socketName(resource))
	waitServing(t, sock)
	// A change that is not sent fails the test rather than hanging it.
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	t.Cleanup(scancel)
	stream, err := dial(t, sock).ListAndWatch(sctx, &pb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// TestPlugin_ConfigMapReload: in a ConfigMap volume config.toml links
// through ..data, which the kubelet swaps on an update; config.toml itself
// sees no event. The change is picked up all the same.
func TestPlugin_ConfigMapReload(t *testing.T) {
	dir, cfgDir := t.TempDir(), t.TempDir()
	version := func(name, data string) {
		if err := os.Mkdir(filepath.Join(cfgDir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfgDir, name, "config.toml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(name, filepath.Join(cfgDir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(cfgDir, "..data_tmp"), filepath.Join(cfgDir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", sharedL40S)
	cfgPath := filepath.Join(cfgDir, "config.toml")
	if err := os.Symlink("..data/config.toml", cfgPath); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir)
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(cfgPath), WithLogger(quiet))
	stream := runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	if got := ids(t, stream); !reflect.DeepEqual(got, []string{"0::0", "0::1"}) {
		t.Fatalf("ListAndWatch sent %v", got)
	}
	version("..v2", strings.Replace(sharedL40S, "replicas = 2", "replicas = 3", 1))
	os.RemoveAll(filepath.Join(cfgDir, "..v1"))
	if got := ids(t, stream); !reflect.DeepEqual(got, []string{"0::0", "0::1", "0::2"}) {
		t.Errorf("after the ConfigMap update ListAndWatch sent %v", got)
	}
}

// TestPlugin_ConfigMovedAway: an editor saving by moving the file away and
// writing a new one leaves no moment where the plugin runs on the
// defaults (a missing default config file is the defaults): the resources
// stay until the new file is read.
func TestPlugin_ConfigMovedAway(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir)
	p := New(loaderOf("l40s", cfgPath, false), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(cfgPath), WithLogger(quiet))
	stream := runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	if got := ids(t, stream); !reflect.DeepEqual(got, []string{"0::0", "0::1"}) {
		t.Fatalf("ListAndWatch sent %v", got)
	}
	if err := os.Rename(cfgPath, cfgPath+"~"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	writeAtomic(t, cfgPath, strings.Replace(sharedL40S, "replicas = 2", "replicas = 3", 1))
	if got := ids(t, stream); !reflect.DeepEqual(got, []string{"0::0", "0::1", "0::2"}) {
		t.Errorf("after the save ListAndWatch sent %v", got)
	}
}

// startKubeletLate binds kubelet.sock in dir and listens on it only after
// delay, as a starting kubelet can: a connection before is refused.
func startKubeletLate(t *testing.T, dir string, delay time.Duration) *kubelet {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: filepath.Join(dir, "kubelet.sock")}); err != nil {
		t.Fatal(err)
	}
	k := newKubelet(dir)
	t.Cleanup(k.stop)
	f := os.NewFile(uintptr(fd), "kubelet.sock")
	go func() {
		time.Sleep(delay)
		if err := syscall.Listen(fd, 16); err != nil {
			t.Error(err)
			return
		}
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			t.Error(err)
			return
		}
		k.srv.Serve(l)
	}()
	return k
}

func ids(t *testing.T, s pb.DevicePlugin_ListAndWatchClient) []string {
	t.Helper()
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range r.Devices {
		out = append(out, d.ID)
	}
	return out
}

func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func TestPlugin_BadConfigAtStart(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte("[[sharing]]\ndevices = [\"12\"]\nstrategy = \"mps\"\nreplicas = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := New(loader("dgx-a100", cfgPath), WithKubeletDir(t.TempDir()), WithCDIDir(t.TempDir()), WithLogger(quiet)).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), cfgPath+`: [[sharing]] entry 1: selector "12" matches no device`) {
		t.Fatalf("Run: %v", err)
	}
}

func TestPreferred(t *testing.T) {
	cfg, err := config.Parse([]byte(`
[kubernetes]
rename-shared = true
[[sharing]]
devices = ["0", "1", "2"]
strategy = "time-slicing"
replicas = 3
`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := inventory.LoadProfile("l40s")
	h, _ := p.Host()
	set, err := offer.Resolve(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rs := set.Resources
	r := &rs[0] // nvidia.com/gpu: GPU 3 whole; replicas mix, so look up by name
	for i := range rs {
		if rs[i].Shared {
			r = &rs[i]
		}
	}
	all := []string{"0::0", "0::1", "0::2", "1::0", "1::1", "1::2", "2::0", "2::1", "2::2"}
	for _, tc := range []struct {
		name, policy          string
		available, must, want []string
		size                  int
	}{
		{"distributed spreads", config.Distributed, all, nil, []string{"0::0", "1::0", "2::0"}, 3},
		{"packed fills one", config.Packed, all, nil, []string{"0::0", "0::1", "0::2", "1::0"}, 4},
		{"distributed avoids used", config.Distributed, []string{"0::1", "0::2", "1::2", "2::0", "2::1", "2::2"}, nil, []string{"2::0", "0::1"}, 2},
		{"packed prefers used", config.Packed, []string{"0::2", "1::0", "1::1", "1::2"}, nil, []string{"0::2", "1::0"}, 2},
		{"must-include kept", config.Distributed, all, []string{"1::2"}, []string{"1::2", "0::0"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := preferred(r, tc.policy, tc.available, tc.must, tc.size); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPreferredTopology: several whole GPUs go to the GPUs closest
// together on a host that gives distances (dgx-a100: pairs behind PCIe
// switches, two NUMA nodes of four), must-include kept, ties to the lowest
// index; a request of one, a host without distances and replicas keep
// the distributed or packed order.
func TestPreferredTopology(t *testing.T) {
	resource := func(profile, conf, name string) *offer.Resource {
		cfg, err := config.Parse([]byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := inventory.LoadProfile(profile)
		h, _ := p.Host()
		set, err := offer.Resolve(h, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rs := set.Resources
		for i := range rs {
			if rs[i].Name == name {
				return &rs[i]
			}
		}
		t.Fatalf("%s: no resource %s", profile, name)
		return nil
	}
	dgx := resource("dgx-a100", "", "nvidia.com/gpu")
	l40s := resource("l40s", "", "nvidia.com/gpu")
	shared := resource("dgx-a100", "[kubernetes]\nrename-shared = true\n[[sharing]]\ndevices = [\"0\", \"2\", \"3\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n", "nvidia.com/gpu.shared")
	all := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	ids := func(s string) []string { return strings.Fields(s) }
	for _, tc := range []struct {
		name            string
		r               *offer.Resource
		policy          string
		available, must []string
		size            int
		want            string
	}{
		{"pair", dgx, config.Distributed, all, nil, 2, "0 1"},
		{"NUMA node", dgx, config.Distributed, all, nil, 4, "0 1 2 3"},
		{"three in one NUMA node", dgx, config.Distributed, ids("0 2 4 5 6"), nil, 3, "4 5 6"},
		{"free pair over lower index", dgx, config.Distributed, ids("1 3 4 5"), nil, 2, "4 5"},
		{"tie to the lowest", dgx, config.Distributed, ids("1 3 5 7"), nil, 2, "1 3"},
		{"across nodes when it must", dgx, config.Distributed, ids("3 4"), nil, 2, "3 4"},
		{"must-include kept", dgx, config.Distributed, all, ids("5"), 2, "5 4"},
		{"must-include grows its node", dgx, config.Distributed, all, ids("1"), 4, "1 0 2 3"},
		{"packed ignores nothing", dgx, config.Packed, ids("0 1 6 7"), ids("6"), 2, "6 7"},
		{"one GPU: policy order", dgx, config.Distributed, ids("3 4"), nil, 1, "3"},
		{"no topology: policy order", l40s, config.Distributed, ids("0 1 2 3"), nil, 2, "0 1"},
		{"replicas: policy order", shared, config.Distributed, ids("0::0 0::1 2::0 2::1 3::0"), nil, 2, "0::0 2::0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := preferred(tc.r, tc.policy, tc.available, tc.must, tc.size)
			if strings.Join(got, " ") != tc.want {
				t.Errorf("got %v, want %s", got, tc.want)
			}
		})
	}
}

// l40sNodes returns an empty config.toml and a device root holding the
// nodes of the l40s profile's four GPUs, for health checks that stat them.
func l40sNodes(t *testing.T) (cfgPath, devRoot string) {
	t.Helper()
	cfgPath, devRoot = filepath.Join(t.TempDir(), "config.toml"), t.TempDir()
	if err := os.WriteFile(cfgPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(devRoot, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(devRoot, "dev", "nvidia"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfgPath, devRoot
}

// TestHealth: a device whose node disappears is sent Unhealthy, and
// Healthy again when it is back.
func TestHealth(t *testing.T) {
	dir := t.TempDir()
	cfgPath, devRoot := l40sNodes(t)
	load := func() (*State, error) {
		st, err := loader("l40s", cfgPath)()
		if err == nil {
			st.Simulated, st.DevRoot = false, devRoot
		}
		return st, err
	}
	startKubelet(t, dir)
	p := New(load, WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithHealthInterval(20*time.Millisecond), WithLogger(quiet))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	sock := filepath.Join(dir, "gpuctk-nvidia.com_gpu.sock")
	waitServing(t, sock)
	stream, err := dial(t, sock).ListAndWatch(ctx, &pb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	health := func() string { return healths(t, stream) }
	if got := health(); got != "0=Healthy 1=Healthy 2=Healthy 3=Healthy" {
		t.Fatalf("at start: %s", got)
	}
	os.Remove(filepath.Join(devRoot, "dev/nvidia2"))
	if got := health(); got != "0=Healthy 1=Healthy 2=Unhealthy 3=Healthy" {
		t.Errorf("node gone: %s", got)
	}
	os.WriteFile(filepath.Join(devRoot, "dev/nvidia2"), nil, 0o644)
	if got := health(); got != "0=Healthy 1=Healthy 2=Healthy 3=Healthy" {
		t.Errorf("node back: %s", got)
	}
}

// BenchmarkAllocate measures an Allocate of one replica over the plugin's
// socket; BenchmarkRoundTrip a bare call on the same socket beside it.
func BenchmarkAllocate(b *testing.B)  { benchCall(b, true) }
func BenchmarkRoundTrip(b *testing.B) { benchCall(b, false) }

func benchCall(b *testing.B, alloc bool) {
	dir := b.TempDir()
	cfgPath := filepath.Join(b.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	st, err := loader("dgx-a100", cfgPath)()
	if err != nil {
		b.Fatal(err)
	}
	var r *offer.Resource
	for i := range st.Resources {
		if st.Resources[i].Name == "nvidia.com/gpu.shared" {
			r = &st.Resources[i]
		}
	}
	c := benchServer(b, dir, st, r)
	req := &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: []string{"0::1"}}}}
	ctx := context.Background()
	var took []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if alloc {
			_, err = c.Allocate(ctx, req)
		} else {
			_, err = c.GetDevicePluginOptions(ctx, &pb.Empty{})
		}
		took = append(took, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}

// TestPlugin_NoConfigFolder: a node without /etc/gpuctk runs on the defaults.
func TestPlugin_NoConfigFolder(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	missing := filepath.Join(t.TempDir(), "absent", "config.toml")
	load := func() (*State, error) {
		cfg, err := config.Load(missing, false)
		if err != nil {
			return nil, err
		}
		p, _ := inventory.LoadProfile("l40s")
		h, _ := p.Host()
		set, err := offer.Resolve(h, cfg)
		if err != nil {
			return nil, err
		}
		return NewState(cfg, set, []byte("spec"), "nvidia.com/gpu", nil, true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- New(load, WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(missing), WithLogger(quiet)).Run(ctx)
	}()
	waitFor(t, "a registration", func() bool { return len(k.registered()) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkListAndWatch sends the devices of dgx-h100-mig with every MIG
// device shared 8 ways, over the socket; it reports the message size.
func BenchmarkListAndWatch(b *testing.B) {
	cfgPath := filepath.Join(b.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte("[kubernetes]\nmig-strategy = \"mixed\"\n[[sharing]]\ndevices = [\"mig\"]\nstrategy = \"time-slicing\"\nreplicas = 8\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	st, err := loader("dgx-h100-mig", cfgPath)()
	if err != nil {
		b.Fatal(err)
	}
	r := &st.Resources[0]
	for i := range st.Resources {
		if len(st.Resources[i].Devices) > len(r.Devices) {
			r = &st.Resources[i]
		}
	}
	c := benchServer(b, b.TempDir(), st, r)
	var size int
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := c.ListAndWatch(ctx, &pb.Empty{})
		if err != nil {
			b.Fatal(err)
		}
		m, err := stream.Recv()
		if err != nil {
			b.Fatal(err)
		}
		size = proto.Size(m)
		cancel()
	}
	b.ReportMetric(float64(size), "bytes/msg")
	b.ReportMetric(float64(len(r.Devices)), "devices")
}

// mpsFixture is a dev root with GPU 0's node and that GPU shared with MPS
// in replicas, a socket listening where its daemon's control socket is.
func mpsFixture(t *testing.T, replicas int) (devRoot string, gpu inventory.Device, share *offer.Share, l net.Listener) {
	t.Helper()
	devRoot = t.TempDir()
	if err := os.MkdirAll(filepath.Join(devRoot, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(devRoot, "dev", "nvidia0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gpu = inventory.Device{GPU: &inventory.GPU{Index: 0, Minor: 0, UUID: "GPU-x"}, Ordinal: -1}
	share = &offer.Share{Device: gpu, Strategy: config.MPS, Replicas: replicas, Dir: t.TempDir()}
	if err := os.MkdirAll(share.PipeDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", share.ControlSocket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return devRoot, gpu, share, l
}

// TestMPSHealthNotFooled checks that a socket a tenant plants where the
// MPS daemon's should be (the pipe folder is writable from every replica
// container) does not make an MPS replica healthy: the check is the
// hook's, which wants the daemon gpuctk recorded.
func TestMPSHealthNotFooled(t *testing.T) {
	devRoot, gpu, share, _ := mpsFixture(t, 2)
	d := offer.Device{Names: []string{"0::0"}, Device: gpu, Share: share}
	if err := deviceHealth(devRoot, d); err == nil || !strings.Contains(err.Error(), "MPS daemon for GPU-x is not running") {
		t.Errorf("a planted socket: health = %v, want the daemon not running", err)
	}
	whole := offer.Device{Names: []string{"0"}, Device: gpu}
	if err := deviceHealth(devRoot, whole); err != nil {
		t.Errorf("whole GPU with its node: %v", err)
	}
	os.Remove(filepath.Join(devRoot, "dev", "nvidia0"))
	if err := deviceHealth(devRoot, whole); err == nil {
		t.Error("a vanished node is healthy")
	}
}

// TestDriverCapabilities: [kubernetes] driver-capabilities gives every
// container its capability devices beside its GPU, in each device-list
// form, and says so when the host's driver has no files for one.
func TestDriverCapabilities(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte("[kubernetes]\ndevice-list-strategy = [\"cdi-cri\", \"cdi-annotations\", \"envvar\"]\ndriver-capabilities = [\"compute\", \"graphics\", \"ngx\", \"graphics\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := loader("l40s", cfgPath)()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"capability-graphics", "capability-ngx"}; !reflect.DeepEqual(st.Capabilities, want) {
		t.Fatalf("capabilities %v, want %v", st.Capabilities, want)
	}
	r := &st.Resources[0]
	resp, err := allocate(r, st.Kind, st.Kubernetes.DeviceListStrategy, st.Capabilities, &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: []string{"1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.ContainerResponses[0]
	var cdiNames []string
	for _, d := range c.CdiDevices {
		cdiNames = append(cdiNames, d.Name)
	}
	want := []string{"nvidia.com/gpu=1", "nvidia.com/gpu=capability-graphics", "nvidia.com/gpu=capability-ngx"}
	if !reflect.DeepEqual(cdiNames, want) {
		t.Errorf("CDI devices %v, want %v", cdiNames, want)
	}
	if got := c.Annotations["cdi.k8s.io/gpuctk_nvidia.com_gpu"]; got != strings.Join(want, ",") {
		t.Errorf("annotation %q, want %q", got, strings.Join(want, ","))
	}
	if got := c.Envs["NVIDIA_DRIVER_CAPABILITIES"]; got != "compute,utility,graphics,ngx" || c.Envs["NVIDIA_VISIBLE_DEVICES"] != "1" {
		t.Errorf("envs %v, want NVIDIA_VISIBLE_DEVICES=1 NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics,ngx", c.Envs)
	}

	// A host whose driver has no graphics files: a note, nothing more.
	cfg, err := config.Load(cfgPath, true)
	if err != nil {
		t.Fatal(err)
	}
	set := &offer.Set{Host: &inventory.Host{}}
	st, err = NewState(cfg, set, []byte("spec"), "nvidia.com/gpu", []string{"capability-ngx"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Capabilities, []string{"capability-ngx"}) || len(st.Notes) != 1 || !strings.Contains(st.Notes[0], `driver-capabilities names "graphics" but this host's driver has no files for it`) {
		t.Errorf("capabilities %v, notes %q", st.Capabilities, st.Notes)
	}
}

// benchServer serves resource r of st on a socket in dir until the
// benchmark ends, and returns a client connected to it.
func benchServer(b *testing.B, dir string, st *State, r *offer.Resource) pb.DevicePluginClient {
	s := newServer(dir, st, r, quiet, nil)
	if err := s.start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.stop)
	conn, err := grpc.NewClient("unix://"+s.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return pb.NewDevicePluginClient(conn)
}

// TestXIDMarks: a device repeating a critical XID stays Unhealthy while
// the plugin keeps one mark for it, not one per event: with
// --xid-recovery 0 none ever expires, and a GPU in an XID storm must not
// grow the plugin's memory or each health check's work.
func TestXIDMarks(t *testing.T) {
	dir := t.TempDir()
	cfgPath, devRoot := l40sNodes(t)
	st, err := loader("l40s", cfgPath)()
	if err != nil {
		t.Fatal(err)
	}
	st.Simulated, st.DevRoot = false, devRoot
	xids := make(chan inventory.XIDEvent)
	startKubelet(t, dir)
	p := New(func() (*State, error) { return st, nil }, WithKubeletDir(dir), WithCDIDir(t.TempDir()),
		WithHealthInterval(time.Hour), WithXIDEvents(xids), WithXIDRecovery(0), WithLogger(quiet))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	sock := filepath.Join(dir, "gpuctk-nvidia.com_gpu.sock")
	waitServing(t, sock)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	stream, err := dial(t, sock).ListAndWatch(sctx, &pb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	ids(t, stream)
	gpu1 := st.Resources[0].Devices[1].GPU.UUID
	for range 1000 {
		xids <- inventory.XIDEvent{GPU: gpu1, GI: -1, CI: -1, XID: 79}
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r.Devices[1].Health != pb.Unhealthy || r.Devices[0].Health != pb.Healthy {
		t.Errorf("after critical XIDs on GPU 1: %v", r.Devices)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(p.marks) != 1 {
		t.Errorf("%d XID marks kept for one device, want 1", len(p.marks))
	}
}

// TestPlugin_HealthIntervalZero: a health interval that is not positive
// is refused in one line before anything is served, not a panic.
func TestPlugin_HealthIntervalZero(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir)
	err := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithHealthInterval(0), WithLogger(quiet)).Run(context.Background())
	if err == nil || err.Error() != "health check interval 0s: must be more than 0" {
		t.Errorf("Run: %v", err)
	}
	// A negative XID recovery time was taken as 0 (Unhealthy until a
	// restart), the opposite of a short one.
	err = New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithHealthInterval(time.Second), WithXIDRecovery(-time.Minute), WithLogger(quiet)).Run(context.Background())
	if err == nil || err.Error() != "XID recovery time -1m0s: must be 0 (Unhealthy until a restart) or more" {
		t.Errorf("Run with --xid-recovery -1m: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "gpuctk-*")); len(m) != 0 {
		t.Errorf("sockets made: %v", m)
	}
}

// TestPlugin_KubeletRestartKeepsSpec: a kubelet restart serves and
// registers the resources again; it does not write the spec again, so a
// spec that cannot be written then (here the CDI folder is gone, a file
// in its place) does not leave the node with no resource at all.
func TestPlugin_KubeletRestartKeepsSpec(t *testing.T) {
	dir, cdiDir := t.TempDir(), filepath.Join(t.TempDir(), "cdi")
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, dir)
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(cdiDir), WithConfigPath(cfgPath), WithLogger(quiet))
	runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	waitFor(t, "2 registrations", func() bool { return len(k.registered()) == 2 })
	if err := os.RemoveAll(cdiDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cdiDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k.stop()
	os.Remove(filepath.Join(dir, "kubelet.sock"))
	k2 := startKubelet(t, dir)
	waitFor(t, "registrations with the new kubelet", func() bool { return len(k2.registered()) == 2 })
}

// TestMPSHealthOncePerDevice: a health check asks each MPS daemon once,
// not once per replica: a daemon that does not answer costs up to the
// check's timeout each time, and the plugin's loop (shutdown, kubelet
// restarts, reloads) waits for the whole check.
func TestMPSHealthOncePerDevice(t *testing.T) {
	// The test process stands in for the daemon gpuctk recorded.
	devRoot, gpu, share, l := mpsFixture(t, 4)
	r := offer.Resource{Name: "nvidia.com/gpu.shared", Shared: true}
	for k := range share.Replicas {
		r.Devices = append(r.Devices, offer.Device{Names: []string{"0::" + string(rune('0'+k))}, Device: gpu, Share: share, Replica: k})
	}
	var mu sync.Mutex
	asked := 0
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			asked++
			mu.Unlock()
			c.Close()
		}
	}()
	var ns, sock syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/mnt", &ns); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(share.ControlSocket(), &sock); err != nil {
		t.Fatal(err)
	}
	rec := fmt.Sprintf(`{"daemonPID": %d, "daemonMountNS": %d, "controlInode": %d}`, os.Getpid(), ns.Ino, sock.Ino)
	if err := os.WriteFile(filepath.Join(share.Dir, "device.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	p := New(nil, WithLogger(quiet))
	if got := p.unhealthy(&State{Resources: []offer.Resource{r}, DevRoot: devRoot}); len(got) != 0 {
		t.Fatalf("unhealthy %v with the daemon answering", got)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return asked }
	waitFor(t, "the daemon asked", func() bool { return count() > 0 })
	time.Sleep(200 * time.Millisecond)
	if n := count(); n != 1 {
		t.Errorf("the daemon of 4 replicas was asked %d times, want 1", n)
	}
}

// TestPlugin_ResourceNameTooLong: a resource name the kubelet socket's
// path or a cdi-annotations key cannot hold is refused at start, in one
// line per resource naming it and its [[sharing]] entry, before the spec
// is written or a socket made; a reload to such a config keeps the last
// good state.
func TestPlugin_ResourceNameTooLong(t *testing.T) {
	long := strings.Repeat("d", 50) + ".example.com/" + strings.Repeat("x", 40)
	tests := []struct {
		name, config, want string
	}{
		{"socket path", "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\nresource = \"" + long + "\"\n",
			"resource " + long + " (config CONFIG: [[sharing]] entry 1): its socket KUBELET/gpuctk-" + strings.ReplaceAll(long, "/", "_") + ".sock is NN bytes, over the 107 a Unix socket's path can hold: choose a shorter resource name, or a shorter --kubelet-dir"},
		{"annotation key", "[kubernetes]\ndevice-list-strategy = [\"cdi-annotations\"]\n[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\nresource = \"example.com/" + strings.Repeat("y", 50) + "\"\n",
			"resource example.com/" + strings.Repeat("y", 50) + " (config CONFIG: [[sharing]] entry 1): device-list-strategy cdi-annotations cannot name it in an annotation key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A short kubelet dir: the annotation key case's socket fits.
			dir, err := os.MkdirTemp("", "gp")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			cdiDir := t.TempDir()
			cfgPath := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(cfgPath, []byte(tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			startKubelet(t, dir)
			// Without the check the plugin would serve: stop it then.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(cdiDir), WithLogger(quiet)).Run(ctx)
			want := strings.ReplaceAll(strings.ReplaceAll(tt.want, "CONFIG", cfgPath), "KUBELET", dir)
			if n := len(filepath.Join(dir, "gpuctk-"+strings.ReplaceAll(long, "/", "_")+".sock")); strings.Contains(want, "NN") {
				want = strings.Replace(want, "NN", strconv.Itoa(n), 1)
			}
			if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Run: %v\nwant one line starting %s", err, want)
			}
			if m, _ := filepath.Glob(filepath.Join(dir, "gpuctk-*")); len(m) != 0 {
				t.Errorf("sockets made: %v", m)
			}
			if m, _ := os.ReadDir(cdiDir); len(m) != 0 {
				t.Errorf("spec written: %v", m)
			}
		})
	}
}

// TestPlugin_SpecChangedElsewhere: the spec the plugin hands out names
// from is rewritten by another writer (`gpuctk mig apply` after a new
// layout, the refresh unit after a driver upgrade). The plugin reads the
// host again, advertises what it has now, and writes its own spec back;
// its own writes, and another writer's of the same bytes, cost no reload.
func TestPlugin_SpecChangedElsewhere(t *testing.T) {
	dir, cdiDir := t.TempDir(), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	// The host: a profile file whose GPUs the test changes, as an apply
	// to a simulated host does.
	host := filepath.Join(t.TempDir(), "host.toml")
	copyProfile := func(name string) {
		data, err := os.ReadFile(filepath.Join("..", "inventory", "profiles", name+".toml"))
		if err != nil {
			t.Fatal(err)
		}
		writeAtomic(t, host, string(data))
	}
	copyProfile("l40s")
	var loads atomic.Int32
	load := func() (*State, error) { loads.Add(1); return loader(host, cfgPath)() }
	startKubelet(t, dir)
	var log syncLog
	p := New(load, WithKubeletDir(dir), WithCDIDir(cdiDir), WithConfigPath(cfgPath), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	stream := runPlugin(t, p, dir, "nvidia.com/gpu")
	if got := ids(t, stream); len(got) != 3 {
		t.Fatalf("ListAndWatch sent %v, want the l40s's 3 unshared GPUs", got)
	}
	spec := filepath.Join(cdiDir, "nvidia.yaml")
	own, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's own write, and the same bytes written again by
	// another (a refresh that agrees), are no change.
	writeAtomic(t, spec, string(own))
	time.Sleep(500 * time.Millisecond)
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads after the plugin's own write and an equal one, want 1\n%s", n, log.String())
	}

	// The host changes, and another writer writes its spec: the plugin
	// sees the new GPUs and puts its own spec back.
	copyProfile("dgx-a100")
	writeAtomic(t, spec, "# Written by gpuctk.\n---\ncdiVersion: \"0.5.0\"\n")
	if got := ids(t, stream); len(got) != 7 {
		t.Errorf("after the spec changed ListAndWatch sent %v, want dgx-a100's 7 unshared GPUs", got)
	}
	want, err := loader(host, cfgPath)()
	if err != nil {
		t.Fatal(err)
	}
	written := func() bool {
		data, err := os.ReadFile(spec)
		return err == nil && string(data) == string(want.Spec)
	}
	waitFor(t, "the plugin's spec to be written back", written)
	if !strings.Contains(log.String(), "the CDI spec was changed by another writer: reading the host again") {
		t.Errorf("the reload is not logged:\n%s", log.String())
	}

	// Removed: written again. A second change so soon waits its turn (a
	// second, doubling while changes keep coming), but comes.
	if err := os.Remove(spec); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removed spec to be written again", written)
	if !strings.Contains(log.String(), "the CDI spec was removed") {
		t.Errorf("the removal is not logged:\n%s", log.String())
	}
}

// syncLog is a log the plugin writes while the test reads it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPlugin_ConfigWrittenInPlace: an editor or a shell writing the config
// in place truncates it and writes it in pieces. Read between them, the
// first piece alone is a valid config of its own (no [[sharing]]: the
// shared resource withdrawn); the plugin reads the file once the writes
// have settled, and goes from 2 replicas to 3 without withdrawing it.
func TestPlugin_ConfigWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir)
	var log syncLog
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(cfgPath), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	// Wide enough that a loaded machine does not stretch the pause
	// between the two writes past it.
	p.settle = time.Second
	stream := runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	if got := ids(t, stream); !reflect.DeepEqual(got, []string{"0::0", "0::1"}) {
		t.Fatalf("ListAndWatch sent %v", got)
	}
	next := strings.Replace(sharedL40S, "replicas = 2", "replicas = 3", 1)
	cut := strings.Index(next, "[[sharing]]")
	f, err := os.OpenFile(cfgPath, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(next[:cut]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := f.WriteString(next[cut:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, stream); !reflect.DeepEqual(got, []string{"0::0", "0::1", "0::2"}) {
		t.Errorf("after the in-place write ListAndWatch sent %v", got)
	}
	if strings.Contains(log.String(), "no longer offered") {
		t.Errorf("the half-written config was applied:\n%s", log.String())
	}
}

// TestPlugin_SocketPathTakenBack: a folder (holding a link out of it) in
// the way of the socket of a resource a reload adds, and a FIFO in the way
// of one's at start, are replaced by the plugin's sockets in one step: the
// resources are served and registered, nothing is followed.
func TestPlugin_SocketPathTakenBack(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, dir)
	if err := syscall.Mkfifo(filepath.Join(dir, socketName("nvidia.com/gpu.shared")), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(cfgPath), WithLogger(logs.logger()))
	runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	waitFor(t, "2 registrations", func() bool { return len(k.registered()) == 2 })
	blocker := filepath.Join(dir, socketName("nvidia.com/gpu-small"))
	if err := os.MkdirAll(filepath.Join(blocker, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(blocker, "out")); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, cfgPath, sharedL40S+"resource = \"nvidia.com/gpu-small\"\n")
	waitFor(t, "nvidia.com/gpu-small to be registered", func() bool {
		return strings.Contains(strings.Join(k.registered(), "\n"), "nvidia.com/gpu-small ")
	})
	waitServing(t, blocker)
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a file the folder's link led to: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".gpuctk-*")); len(m) != 0 {
		t.Errorf("left in the kubelet dir: %v", m)
	}
	for _, want := range []string{"socket path held a FIFO", "socket path held a folder"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line with %q:\n%s", want, logs.String())
		}
	}
}

// TestPlugin_KubeletDroppedWatch: the kubelet dials a plugin once, when it
// registers; a client it drops (its ListAndWatch failed) leaves the
// resource unallocatable for good. The plugin sees its stream end and
// registers that resource again, and only that one.
func TestPlugin_KubeletDroppedWatch(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, dir)
	log := &syncLog{}
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(cfgPath),
		WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	p.watchGrace = 300 * time.Millisecond
	runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	waitFor(t, "2 registrations", func() bool { return len(k.registered()) == 2 })
	// Watched resources are left alone.
	time.Sleep(2 * p.watchGrace)
	if got := k.registered(); len(got) != 2 {
		t.Fatalf("registrations while the kubelet watched every resource:\n%s", strings.Join(got, "\n"))
	}
	k.drop("nvidia.com/gpu")
	waitFor(t, "nvidia.com/gpu registered again", func() bool { return len(k.registered()) == 3 })
	if got := k.registered()[2]; got != "nvidia.com/gpu gpuctk-nvidia.com_gpu.sock" {
		t.Errorf("registered again: %s, want nvidia.com/gpu", got)
	}
	if !strings.Contains(log.String(), `msg="the kubelet is not watching the resource (restarting, or it dropped the plugin's client): registering it again" resource=nvidia.com/gpu`) {
		t.Errorf("log does not say why:\n%s", log)
	}
	time.Sleep(lostGrace + 2*p.watchGrace)
	if got := k.registered(); len(got) != 3 {
		t.Errorf("registrations once the kubelet watched again:\n%s", strings.Join(got, "\n"))
	}
}

// deafKubelet takes registrations and never opens ListAndWatch.
type deafKubelet struct {
	pb.UnimplementedRegistrationServer
	mu   sync.Mutex
	regs []string
}

func (k *deafKubelet) Register(_ context.Context, r *pb.RegisterRequest) (*pb.Empty, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.regs = append(k.regs, r.ResourceName)
	return &pb.Empty{}, nil
}

func (k *deafKubelet) count(resource string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return strings.Count(strings.Join(k.regs, " ")+" ", resource+" ")
}

// TestPlugin_KubeletNeverWatched: a kubelet that takes a registration but
// opens no ListAndWatch for watchGrace is registered with again.
func TestPlugin_KubeletNeverWatched(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &deafKubelet{}
	srv := grpc.NewServer()
	pb.RegisterRegistrationServer(srv, k)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	p := New(loaderOf("l40s", filepath.Join(t.TempDir(), "config.toml"), false), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithLogger(quiet))
	p.watchGrace = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, "nvidia.com/gpu registered a second time", func() bool { return k.count("nvidia.com/gpu") >= 2 })
}

// TestMPSHealthHungDaemonsInParallel: MPS daemons that stop accepting (a
// GPU fault can hang every daemon of a node at once) cost the health
// check its connect timeout each. Checked one after the other, N of them
// hold the plugin's loop (SIGTERM, kubelet restarts, reloads) for N
// times that timeout at every tick; checked together, for one.
func TestMPSHealthHungDaemonsInParallel(t *testing.T) {
	const n = 4
	devRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(devRoot, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	var ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/mnt", &ns); err != nil {
		t.Fatal(err)
	}
	r := offer.Resource{Name: "nvidia.com/gpu.shared", Shared: true}
	for i := range n {
		if err := os.WriteFile(filepath.Join(devRoot, "dev", "nvidia"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		gpu := inventory.Device{GPU: &inventory.GPU{Index: i, Minor: i, UUID: "GPU-" + strconv.Itoa(i)}, Ordinal: -1}
		share := &offer.Share{Device: gpu, Strategy: config.MPS, Replicas: 2, Dir: t.TempDir()}
		if err := os.MkdirAll(share.PipeDir(), 0o755); err != nil {
			t.Fatal(err)
		}
		// A daemon that accepts nothing: a backlog of 0, already full.
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: share.ControlSocket()}); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Listen(fd, 0); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("unix", share.ControlSocket())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		var sock syscall.Stat_t
		if err := syscall.Stat(share.ControlSocket(), &sock); err != nil {
			t.Fatal(err)
		}
		rec := fmt.Sprintf(`{"daemonPID": %d, "daemonMountNS": %d, "controlInode": %d}`, os.Getpid(), ns.Ino, sock.Ino)
		if err := os.WriteFile(filepath.Join(share.Dir, "device.json"), []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
		for k := range 2 {
			r.Devices = append(r.Devices, offer.Device{Names: []string{fmt.Sprintf("%d::%d", i, k)}, Device: gpu, Share: share, Replica: k})
		}
	}
	p := New(nil, WithLogger(quiet))
	start := time.Now()
	got := p.unhealthy(&State{Resources: []offer.Resource{r}, DevRoot: devRoot})
	took := time.Since(start)
	if len(got) != 2*n {
		t.Errorf("unhealthy %v, want every replica of the %d hung daemons", got, n)
	}
	// One connect timeout (2 s), with room for a loaded machine.
	if took > 4*time.Second {
		t.Errorf("the health check of %d hung MPS daemons took %v: checked one after the other", n, took.Round(100*time.Millisecond))
	}
}

// TestTopologyNUMA: as NVIDIA's plugin does, each device is advertised
// with its GPU's NUMA node (sysfs numa_node of its PCI bus ID under the
// dev root), so that the kubelet's Topology Manager can align a pod's GPUs
// with its CPUs; a node with no NUMA affinity (-1) gives no hint.
func TestTopologyNUMA(t *testing.T) {
	devRoot := t.TempDir()
	for bus, node := range map[string]string{"0000:01:00.0": "1\n", "0000:41:00.0": "-1\n"} {
		dir := filepath.Join(devRoot, "sys", "bus", "pci", "devices", bus)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(node), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Parse([]byte("[cdi]\ndev-root = \"" + devRoot + "\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := inventory.LoadProfile("l40s")
	h, _ := p.Host()
	h.ReadNUMA(devRoot) // as the plugin's host loader does on a real host
	set, err := offer.Resolve(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewState(cfg, set, nil, "nvidia.com/gpu", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range firstDevices(t, st, &st.Resources[0]) {
		var nodes []string
		for _, n := range d.Topology.GetNodes() {
			nodes = append(nodes, strconv.FormatInt(n.ID, 10))
		}
		got[d.ID] = strings.Join(nodes, ",")
	}
	if got["0"] != "1" || got["1"] != "" {
		t.Errorf("ListAndWatch topology: %v, want GPU 0 on NUMA node 1, GPU 1 with none", got)
	}

	// A simulated host's come from its profile: dgx-a100's GPUs 0-3 on
	// node 0, its MIG devices (GPUs 4-7) on node 1.
	p, _ = inventory.LoadProfile("dgx-a100")
	h, _ = p.Host()
	cfg, _ = config.Parse([]byte("[kubernetes]\nmig-strategy = \"mixed\"\n"))
	if set, err = offer.Resolve(h, cfg); err != nil {
		t.Fatal(err)
	}
	if st, err = NewState(cfg, set, nil, "nvidia.com/gpu", nil, true); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	for i := range st.Resources {
		r := &st.Resources[i]
		for _, d := range firstDevices(t, st, r) {
			want := int64(0)
			if strings.HasPrefix(d.ID, "mig-") {
				want = 1
			}
			if n := d.Topology.GetNodes(); len(n) != 1 || n[0].ID != want {
				t.Errorf("%s %s: topology %v, want NUMA node %d", r.Name, d.ID, n, want)
			}
			seen[want]++
		}
	}
	if seen[0] != 4 || seen[1] != 16 {
		t.Errorf("devices seen on NUMA nodes 0 and 1: %v, want 4 GPUs and 16 MIG devices", seen)
	}
}

// firstDevices serves resource r of st and returns the devices of its
// ListAndWatch stream's first message.
func firstDevices(t *testing.T, st *State, r *offer.Resource) []*pb.Device {
	t.Helper()
	s := newServer(t.TempDir(), st, r, quiet, nil)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := dial(t, s.socket).ListAndWatch(ctx, &pb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Devices
}
