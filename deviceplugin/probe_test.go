package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProbe: the container probes pass while the plugin serves, and fail,
// naming the socket, for a socket nothing answers on (a plugin that died
// or hangs); readiness needs a resource served.
func TestProbe(t *testing.T) {
	dir, cdiDir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	if err := Probe(ctx, dir, false, time.Second); err != nil {
		t.Errorf("liveness with no socket yet (the plugin starting): %v", err)
	}
	if err := Probe(ctx, dir, true, time.Second); err == nil || !strings.Contains(err.Error(), "no resource is served yet") {
		t.Errorf("readiness with no socket: %v", err)
	}

	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(sharedConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, dir)
	p := New(loader("dgx-a100", cfgPath), WithKubeletDir(dir), WithCDIDir(cdiDir), WithConfigPath(cfgPath), WithLogger(quiet))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- p.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "6 registrations", func() bool { return len(k.registered()) == 6 })
	for _, ready := range []bool{false, true} {
		if err := Probe(ctx, dir, ready, 5*time.Second); err != nil {
			t.Errorf("probe (ready %v) of a serving plugin: %v", ready, err)
		}
	}

	// A socket nobody serves: a plugin that died. And one that accepts
	// and never answers: a plugin that hangs.
	dead := filepath.Join(dir, socketName("example.com/dead"))
	l, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	hung := filepath.Join(dir, socketName("example.com/hung"))
	h, err := net.Listen("unix", hung)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	start := time.Now()
	err = Probe(ctx, dir, false, 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), dead+" does not answer") || !strings.Contains(err.Error(), hung+" does not answer") {
		t.Errorf("probe with a dead and a hung socket: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("probe took %s with a 500ms timeout per socket", d)
	}
}
