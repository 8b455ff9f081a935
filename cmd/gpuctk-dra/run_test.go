package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestRefused: what the driver refuses before it serves, one line each.
func TestRefused(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(good, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("[dra]\ndriver-name = \"GPU\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"gpuctk-dra", "--simulate", "l40s", "--kubeconfig", kubeconfig, "--cdi-dir", filepath.Join(dir, "cdi"),
		"--plugin-dir", filepath.Join(dir, "p"), "--registrar-dir", filepath.Join(dir, "reg"), "--device-plugin-dir", ""}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"stray argument", []string{"--config", good, "serve"}, `unexpected argument "serve": the driver takes flags only`},
		{"no node name", []string{"--config", good}, "no node name: set --node-name or NODE_NAME (the DaemonSet passes spec.nodeName)"},
		{"bad driver name", []string{"--config", bad, "--node-name", "n"}, `[dra] driver-name "GPU" is not a DNS subdomain`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "")
			app := &cli.App{Flags: flags(), Writer: io.Discard, ErrWriter: io.Discard, Action: run}
			err := app.Run(append(common[:len(common):len(common)], tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want %s", err, tc.want)
			}
		})
	}
}
