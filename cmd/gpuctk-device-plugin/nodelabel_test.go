package main

import (
	"context"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNodeLabel: --node-name reads the node's nvidia.com/device-plugin.config
// label from the API server with the pod's service account token and
// writes it to the name file, again when it changes; a refusal (no RBAC)
// leaves the file as it was.
func TestNodeLabel(t *testing.T) {
	var mu sync.Mutex
	label, status := "shared4", http.StatusOK
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/api/v1/nodes/gpu-node-1" || r.Header.Get("Authorization") != "Bearer tok3n" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		if status != http.StatusOK {
			http.Error(w, "nodes is forbidden", status)
			return
		}
		fmt.Fprintf(w, `{"kind":"Node","metadata":{"name":"gpu-node-1","labels":{"kubernetes.io/hostname":"gpu-node-1","nvidia.com/device-plugin.config":%q}}}`, label)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	sa := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	os.WriteFile(filepath.Join(sa, "ca.crt"), ca, 0o644)
	os.WriteFile(filepath.Join(sa, "token"), []byte("tok3n\n"), 0o600)

	n, err := newNodeLabel("gpu-node-1", "nvidia.com/device-plugin.config", sa)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "name")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go n.follow(ctx, file, 20*time.Millisecond, slog.New(slog.DiscardHandler), ready)
	<-ready
	wait := func(step, want string) {
		t.Helper()
		var got []byte
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if got, _ = os.ReadFile(file); string(got) == want {
				return
			}
		}
		t.Fatalf("%s: name file %q, want %q", step, got, want)
	}
	wait("first read", "shared4\n")
	mu.Lock()
	label = "whole"
	mu.Unlock()
	wait("label changed", "whole\n")
	mu.Lock()
	status, label = http.StatusForbidden, "other"
	mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	wait("API refusing: file kept", "whole\n")
	mu.Lock()
	status, label = http.StatusOK, ""
	mu.Unlock()
	wait("label removed", "\n")

	if _, err := n.get(ctx); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sa, "token"), []byte("expired"), 0o600)
	if _, err := n.get(ctx); err == nil || !strings.Contains(err.Error(), "403 Forbidden (the plugin's service account needs get on nodes)") {
		t.Errorf("get with a bad token: %v", err)
	}
}
