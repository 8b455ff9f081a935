package deviceplugin

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	pb "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// logBuffer is a log destination tests read while the plugin writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// TestAllocateLongID: a 3 MB device ID in Allocate is refused with an
// error and a log line that quote a cut of it, not the 3 MB.
func TestAllocateLongID(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir)
	var logs logBuffer
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(cfgPath), WithLogger(logs.logger()))
	runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	id := strings.Repeat("0", 3<<20)
	_, err := dial(t, filepath.Join(dir, socketName("nvidia.com/gpu.shared"))).Allocate(context.Background(),
		&pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: []string{id}}}})
	if err == nil {
		t.Fatal("a 3 MB device ID was allocated")
	}
	if msg := err.Error(); len(msg) > 1024 || !strings.Contains(msg, `000"... (3145528 bytes more) is not advertised`) {
		t.Errorf("error of %d bytes: %.300s", len(msg), msg)
	}
	waitFor(t, "the refusal logged", func() bool { return strings.Contains(logs.String(), "allocate refused") })
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2048 {
			t.Errorf("log line of %d bytes: %.300s", len(line), line)
		}
	}
}

// healths is what one ListAndWatch message says: "ID=Health" each.
func healths(t *testing.T, s pb.DevicePlugin_ListAndWatchClient) string {
	t.Helper()
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range r.Devices {
		out = append(out, d.ID+"="+d.Health)
	}
	return strings.Join(out, " ")
}

// restartKubelet stops k and starts a new one in dir, as a kubelet
// restarting does (a new kubelet.sock).
func restartKubelet(t *testing.T, k *kubelet, dir string) *kubelet {
	t.Helper()
	k.stop()
	os.Remove(filepath.Join(dir, "kubelet.sock"))
	return startKubelet(t, dir)
}

// TestPlugin_ConfigFIFO: the config swapped for a FIFO (no writer) while
// the plugin runs is refused at once: the plugin keeps its state, answers
// a restarted kubelet, allocates, and reads the next good config.
func TestPlugin_ConfigFIFO(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, dir)
	var logs logBuffer
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(cfgPath), WithLogger(logs.logger()))
	stream := runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	ids(t, stream)
	waitFor(t, "2 registrations", func() bool { return len(k.registered()) == 2 })
	if err := syscall.Mkfifo(cfgPath+".new", 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cfgPath+".new", cfgPath); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the FIFO refused", func() bool { return strings.Contains(logs.String(), "a FIFO, not a regular file") })
	k2 := restartKubelet(t, k, dir)
	waitFor(t, "registrations with the restarted kubelet", func() bool { return len(k2.registered()) == 2 })
	sock := filepath.Join(dir, socketName("nvidia.com/gpu.shared"))
	if _, err := dial(t, sock).Allocate(context.Background(), &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: []string{"0::1"}}}}); err != nil {
		t.Errorf("Allocate after the FIFO: %v", err)
	}
	writeAtomic(t, cfgPath, strings.Replace(sharedL40S, "replicas = 2", "replicas = 3", 1))
	s2, err := dial(t, sock).ListAndWatch(t.Context(), &pb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the good config read", func() bool { return len(ids(t, s2)) == 3 })
}

// TestPlugin_HungReload: a reload that hangs (a loader that never returns:
// a read or a cache fill stuck) runs off the plugin's loop, which keeps
// answering a restarted kubelet and shuts down.
func TestPlugin_HungReload(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, dir)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	var calls atomic.Int32
	good := loader("l40s", cfgPath)
	load := func() (*State, error) {
		if calls.Add(1) > 1 {
			<-hang
			// Released as the test ends: nothing more is written.
			return nil, errors.New("released")
		}
		return good()
	}
	p := New(load, WithKubeletDir(dir), WithCDIDir(t.TempDir()), WithConfigPath(cfgPath), WithLogger(quiet))
	runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	waitFor(t, "2 registrations", func() bool { return len(k.registered()) == 2 })
	writeAtomic(t, cfgPath, sharedL40S+"\n")
	waitFor(t, "the reload to start", func() bool { return calls.Load() == 2 })
	k2 := restartKubelet(t, k, dir)
	waitFor(t, "registrations with the restarted kubelet", func() bool { return len(k2.registered()) == 2 })
}

// TestPlugin_SpecPathTakenBack: the plugin's own spec replaced by a FIFO,
// a link out of the folder or a folder is taken back, the state's spec
// written in its place, without following it; the devices stay Healthy.
func TestPlugin_SpecPathTakenBack(t *testing.T) {
	dir, cdiDir := t.TempDir(), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "host")
	if err := os.WriteFile(outside, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir)
	var logs logBuffer
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(cdiDir), WithConfigPath(cfgPath), WithLogger(logs.logger()))
	stream := runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	ids(t, stream)
	spec := filepath.Join(cdiDir, "nvidia.yaml")
	want, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func(p string) error
	}{
		{"a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"a symbolic link", func(p string) error { return os.Symlink(outside, p) }},
		{"a folder", func(p string) error { return os.MkdirAll(filepath.Join(p, "sub"), 0o755) }},
	} {
		tmp := filepath.Join(cdiDir, "planted")
		if err := tc.make(tmp); err != nil {
			t.Fatal(err)
		}
		if tc.name == "a folder" {
			// A folder cannot be renamed over a file: exchanged.
			if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, spec, unix.RENAME_EXCHANGE); err != nil {
				t.Fatal(err)
			}
			os.Remove(tmp)
		} else if err := os.Rename(tmp, spec); err != nil {
			t.Fatal(err)
		}
		waitFor(t, tc.name+" taken back", func() bool {
			fi, err := os.Lstat(spec)
			return err == nil && fi.Mode().IsRegular() && strings.Contains(logs.String(), "held "+tc.name)
		})
		if got, _ := os.ReadFile(spec); string(got) != string(want) {
			t.Errorf("after %s the spec differs", tc.name)
		}
		if !strings.Contains(logs.String(), "the CDI spec's path held "+tc.name+": replaced by the spec") {
			t.Errorf("no log line for %s:\n%s", tc.name, logs.String())
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Errorf("the link's target changed: %q", b)
	}
	if entries, _ := os.ReadDir(cdiDir); len(entries) != 1 {
		t.Errorf("left in the CDI dir: %v", entries)
	}
	// The stream ends with the devices Healthy: the last message.
	var last string
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		s, err := dial(t, filepath.Join(dir, socketName("nvidia.com/gpu.shared"))).ListAndWatch(ctx, &pb.Empty{})
		if err == nil {
			last = healths(t, s)
		}
		cancel()
		break
	}
	if last != "0::0=Healthy 0::1=Healthy" {
		t.Errorf("after the spec was taken back: %s", last)
	}
}

// TestPlugin_SpecUnwritableUnhealthy: a spec path held by a FIFO that the
// plugin cannot take back (its folder immutable) is no spec: its devices
// are sent Unhealthy until the spec is written again, then Healthy.
func TestPlugin_SpecUnwritableUnhealthy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the CDI dir made immutable (chattr +i)")
	}
	dir, cdiDir := t.TempDir(), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir)
	var logs logBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(cdiDir), WithConfigPath(cfgPath), WithLogger(logs.logger()))
	stream := runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	if got := healths(t, stream); got != "0::0=Healthy 0::1=Healthy" {
		t.Fatalf("at start: %s", got)
	}
	spec := filepath.Join(cdiDir, "nvidia.yaml")
	// The FIFO, then the lock, well within the 100 ms the plugin lets a
	// change in the folder settle.
	if err := syscall.Mkfifo(spec+".new", 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setImmutable(t, cdiDir, false) })
	if err := os.Rename(spec+".new", spec); err != nil {
		t.Fatal(err)
	}
	setImmutable(t, cdiDir, true)
	if got := healths(t, stream); got != "0::0=Unhealthy 0::1=Unhealthy" {
		t.Errorf("with a FIFO as the spec: %s", got)
	}
	if fi, err := os.Lstat(spec); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO: %v %v", fi, err)
	}
	setImmutable(t, cdiDir, false)
	if got := healths(t, stream); got != "0::0=Healthy 0::1=Healthy" {
		t.Errorf("once the spec could be written: %s", got)
	}
	if fi, err := os.Lstat(spec); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the spec: %v %v", fi, err)
	}
}

// setImmutable sets or clears the immutable flag of path (chattr +i).
func setImmutable(t *testing.T, path string, on bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatal(err)
	}
	if on {
		flags |= fsImmutable
	} else {
		flags &^= fsImmutable
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
		t.Fatal(err)
	}
}

// fsImmutable is FS_IMMUTABLE_FL (linux/fs.h), which x/sys/unix lacks.
const fsImmutable = 0x10

// TestPlugin_SpecRemovedBadConfig: the spec removed while the config is
// bad (a reload fails) is written back from the last good state, and the
// devices, Unhealthy while it is missing, are Healthy again.
func TestPlugin_SpecRemovedBadConfig(t *testing.T) {
	dir, cdiDir := t.TempDir(), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedL40S), 0o644); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir)
	p := New(loader("l40s", cfgPath), WithKubeletDir(dir), WithCDIDir(cdiDir), WithConfigPath(cfgPath), WithLogger(quiet))
	stream := runPlugin(t, p, dir, "nvidia.com/gpu.shared")
	if got := healths(t, stream); got != "0::0=Healthy 0::1=Healthy" {
		t.Fatalf("at start: %s", got)
	}
	spec := filepath.Join(cdiDir, "nvidia.yaml")
	want, _ := os.ReadFile(spec)
	// A config the plugin refuses (one replica), read by no reload yet:
	// written in place, as the settle time lets the removal go first.
	if err := os.WriteFile(cfgPath+".bad", []byte(strings.Replace(sharedL40S, "replicas = 2", "replicas = 1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(spec)
	os.Rename(cfgPath+".bad", cfgPath)
	if got := healths(t, stream); got != "0::0=Unhealthy 0::1=Unhealthy" {
		t.Errorf("with no spec: %s", got)
	}
	if got := healths(t, stream); got != "0::0=Healthy 0::1=Healthy" {
		t.Errorf("once written back: %s", got)
	}
	if got, err := os.ReadFile(spec); err != nil || string(got) != string(want) {
		t.Errorf("the spec written back differs (%v)", err)
	}
}
