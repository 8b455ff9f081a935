package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/cdi"
)

// TestMigration: on a fake host root, what NVIDIA's device plugin, GPU
// feature discovery and nvidia-ctk left is listed in the order to remove
// it; gpuctk's own plugin socket and spec, another vendor's spec and a
// JSON spec (which cannot say whose it is) are not.
func TestMigration(t *testing.T) {
	const (
		plugins  = "var/lib/kubelet/device-plugins"
		features = "etc/kubernetes/node-feature-discovery/features.d"
	)
	nvidiaCTK := "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
	for _, tc := range []struct {
		name  string
		files map[string]string // path under the root -> contents ("sock" for a socket)
		want  []string          // the start of each line, the root as ROOT
	}{
		{"fresh node", nil, nil},
		{"gpuctk only", map[string]string{
			plugins + "/kubelet.sock":               "sock",
			plugins + "/gpuctk-nvidia.com_gpu.sock": "sock",
			features + "/gpuctk":                    "nvidia.com/gpu.present=true\n",
			"var/run/cdi/nvidia.yaml":               cdi.Marker + "\n" + nvidiaCTK,
			"etc/cdi/other.yaml":                    strings.Replace(nvidiaCTK, "nvidia.com/gpu", "example.com/gpu", 1),
			"etc/cdi/nvidia.json":                   `{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": []}`,
		}, nil},
		{"NVIDIA's stack", map[string]string{
			plugins + "/kubelet.sock":            "sock",
			plugins + "/nvidia-gpu.sock":         "sock",
			plugins + "/nvidia-mig-1g.10gb.sock": "sock",
			features + "/gfd":                    "nvidia.com/gpu.present=true\n",
			"var/run/cdi/nvidia.yaml":            nvidiaCTK,
			"etc/cdi/nvidia.yaml":                nvidiaCTK,
		}, []string{
			"1. NVIDIA's device plugin serves here (nvidia-gpu.sock, nvidia-mig-1g.10gb.sock in ROOT/var/lib/kubelet/device-plugins): remove it first",
			"2. GPU feature discovery's labels are in ROOT/etc/kubernetes/node-feature-discovery/features.d/gfd: remove GFD",
			"3. ROOT/etc/cdi/nvidia.yaml is another tool's spec of kind nvidia.com/gpu (nvidia-ctk's): stop what writes it",
			"3. ROOT/var/run/cdi/nvidia.yaml is another tool's spec of kind nvidia.com/gpu (nvidia-ctk's): stop what writes it",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, data := range tc.files {
				p = filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if data == "sock" {
					l, err := net.Listen("unix", p)
					if err != nil {
						t.Fatal(err)
					}
					defer l.Close()
					continue
				}
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := migration(root, []string{"/etc/cdi", "/var/run/cdi"}, "nvidia.com/gpu")
			if len(got) != len(tc.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if w = strings.ReplaceAll(w, "ROOT", root); !strings.HasPrefix(got[i], w) {
					t.Errorf("line %d:\n%s\nwant it to begin\n%s", i+1, got[i], w)
				}
			}
		})
	}
}
