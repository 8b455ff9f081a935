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

// apiServer is a loopback HTTPS API server holding one Node, gpu-node-1,
// for the pod's service account token tok3n. It sets
// KUBERNETES_SERVICE_HOST and _PORT as a pod has them and returns the
// service account folder (token, ca.crt) and a setter of the node's
// nvidia.com/device-plugin.config label ("" for none) and of the status
// it answers (403: no RBAC).
func apiServer(t *testing.T) (saDir string, set func(label string, status int)) {
	t.Helper()
	var mu sync.Mutex
	label, status := "", http.StatusOK
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
		labels := `"kubernetes.io/hostname":"gpu-node-1"`
		if label != "" {
			labels += fmt.Sprintf(`,"nvidia.com/device-plugin.config":%q`, label)
		}
		fmt.Fprintf(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"gpu-node-1","labels":{%s}}}`, labels)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	sa := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(sa, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sa, "token"), []byte("tok3n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return sa, func(l string, s int) {
		mu.Lock()
		defer mu.Unlock()
		label, status = l, s
	}
}

// TestNodeLabel: --node-name reads the node's nvidia.com/device-plugin.config
// label from the API server with the pod's service account token and
// writes it to the name file, again when it changes; a refusal (no RBAC)
// leaves the file as it was.
func TestNodeLabel(t *testing.T) {
	sa, set := apiServer(t)
	set("shared4", http.StatusOK)
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
	set("whole", http.StatusOK)
	wait("label changed", "whole\n")
	set("other", http.StatusForbidden)
	time.Sleep(100 * time.Millisecond)
	wait("API refusing: file kept", "whole\n")
	set("", http.StatusOK)
	wait("label removed", "\n")

	if _, err := n.get(ctx); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sa, "token"), []byte("expired"), 0o600)
	if _, err := n.get(ctx); err == nil || !strings.Contains(err.Error(), "403 Forbidden (the plugin's service account needs get on nodes)") {
		t.Errorf("get with a bad token: %v", err)
	}
}

// TestNodeLabelChoosesConfig: the plugin as the chart and the per-node
// component run it (--config-dir, --config-default, a name file in an
// empty folder, NODE_NAME) against an API server: it starts on the config
// its node's label names, switches when the label changes, keeps the last
// good one when the label names none the ConfigMap has or the API server
// refuses, and falls back to the default when the label goes.
func TestNodeLabelChoosesConfig(t *testing.T) {
	sa, set := apiServer(t)
	set("shared4", http.StatusOK)
	dir := t.TempDir()
	configs, labelsDir, nameFile := filepath.Join(dir, "configs"), filepath.Join(dir, "features.d"), filepath.Join(dir, "config", "name")
	for _, d := range []string{configs, filepath.Join(dir, "kubelet")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	configMapVolume(t, configs, 1, map[string]string{"config.toml": "", "shared4.toml": timeSliced(4), "shared2.toml": timeSliced(2)})
	t.Setenv("NODE_NAME", "gpu-node-1")
	startPlugin(t, "--simulate", "l40s", "--config-dir", configs, "--config-default", "config", "--config-name-file", nameFile,
		"--service-account-dir", sa, "--node-label-interval", "50ms",
		"--labels-dir", labelsDir, "--cdi-dir", filepath.Join(dir, "cdi"), "--kubelet-dir", filepath.Join(dir, "kubelet"))
	waitReplicas := func(step, want string) { t.Helper(); waitLabel(t, labelsDir, step, "nvidia.com/gpu.replicas", want) }
	waitReplicas("started on the label's shared4", "4")
	set("shared2", http.StatusOK)
	waitReplicas("label shared2", "2")
	set("missing", http.StatusOK)
	time.Sleep(300 * time.Millisecond)
	waitReplicas("label naming no config: the last good one kept", "2")
	set("shared4", http.StatusForbidden)
	time.Sleep(300 * time.Millisecond)
	waitReplicas("API server refusing: kept", "2")
	set("", http.StatusOK)
	waitReplicas("label removed: --config-default", "1")
}
