package deviceplugin

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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
