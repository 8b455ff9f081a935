package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

// serviceAccountDir is where a pod's service account token and the
// cluster's CA are mounted.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// maxNodeSize bounds the Node object read: a node's JSON is some KiB.
const maxNodeSize = 4 << 20

// nodeLabel reads one label of one node from the API server, with the
// pod's service account (RBAC: get on nodes): a plain GET, as the label
// is all the plugin needs of the API (no client library).
type nodeLabel struct {
	url       string // the Node object's
	label     string
	tokenFile string
	client    *http.Client
}

// newNodeLabel reads the label of node from the API server the pod's
// environment names (KUBERNETES_SERVICE_HOST, _PORT), trusting the CA in
// saDir.
func newNodeLabel(node, label, saDir string) (*nodeLabel, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("--node-name: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: run in a pod, or give --config-name-file written otherwise")
	}
	ca, err := readfile.Limited(filepath.Join(saDir, "ca.crt"), 1<<20)
	if err != nil {
		return nil, fmt.Errorf("--node-name: the cluster's CA: %w (mount the service account token: automountServiceAccountToken or a projected volume)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("--node-name: %s holds no PEM certificate", filepath.Join(saDir, "ca.crt"))
	}
	base := "https://" + net.JoinHostPort(host, port)
	return &nodeLabel{
		url: base + "/api/v1/nodes/" + url.PathEscape(node), label: label, tokenFile: filepath.Join(saDir, "token"),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	}, nil
}

// get returns the label's value, "" when the node has no such label.
func (n *nodeLabel) get(ctx context.Context) (string, error) {
	// Read at each call: the kubelet rotates a projected token.
	token, err := readfile.Limited(n.tokenFile, 64<<10)
	if err != nil {
		return "", fmt.Errorf("service account token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxNodeSize))
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", n.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s (the plugin's service account needs get on nodes)", n.url, resp.Status)
	}
	var node struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &node); err != nil {
		return "", fmt.Errorf("GET %s: %w", n.url, err)
	}
	return node.Metadata.Labels[n.label], nil
}

// follow writes the label's value to file (a line; empty when the node
// has none) now and whenever it changes, checking every interval until
// ctx ends: the plugin watches the file (--config-name-file) and switches
// configurations. An API server that does not answer leaves the file, and
// the configuration, as they are. ready is closed after the first try, so
// that the plugin starts on the node's configuration.
func (n *nodeLabel) follow(ctx context.Context, file string, interval time.Duration, log *slog.Logger, ready chan<- struct{}) {
	last, known := "", false
	for {
		v, err := n.get(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				log.Warn("node label not read: keeping the configuration", "label", n.label, "err", err)
			}
		case !known || v != last:
			if err := atomicfile.WriteFile(file, []byte(v+"\n"), 0o644); err != nil {
				log.Error("node label not written", "file", file, "err", err)
				break
			}
			log.Info("node label", "label", n.label, "value", v)
			last, known = v, true
		}
		if ready != nil {
			close(ready)
			ready = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
