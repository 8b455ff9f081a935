package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorPath drives what issue 50 found on the cluster operator's
// path, with the built binaries: NVIDIA's standard time-slicing config
// imports and is accepted on a node with GPUs in MIG mode, with every
// GPU replicated as NVIDIA's plugin does; a ConfigMap with a blank key
// imports its other keys; envvar is warned of; `config check` refuses
// what the plugin refuses, in one line.
func TestOperatorPath(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("time-slicing on a MIG node", func(t *testing.T) {
		in := write("ts.yaml", "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
		toml, stderr, code := runResult(t, bin("gpuctk"), "config", "import-device-plugin", in)
		if code != 0 || stderr != "" {
			t.Fatalf("import: exit %d, stderr %q", code, stderr)
		}
		cfg := write("ts.toml", toml)
		out, stderr, code := runResult(t, bin("gpuctk"), "config", "check", "--simulate", "dgx-a100", "--config", cfg)
		if code != 0 || out != "nvidia.com/gpu: 32 replicas of 8 devices (time-slicing)\n" {
			t.Errorf("config check: exit %d, stdout %q, stderr %q", code, out, stderr)
		}
		if !strings.Contains(stderr, "GPU 4, 5, 6, 7 in MIG mode: advertised whole as nvidia.com/gpu") {
			t.Errorf("config check: stderr %q, want the MIG mode warning", stderr)
		}
	})
	t.Run("blank ConfigMap key", func(t *testing.T) {
		cm, err := filepath.Abs("../nvconfig/testdata/nvidia/blank-default-configmap.yaml")
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "configs")
		_, stderr, code := runResult(t, bin("gpuctk"), "config", "import-device-plugin", "--output-dir", out, cm)
		if code != 0 || !strings.Contains(stderr, "gpuctk: warning: "+cm+": data.default: empty: skipped") {
			t.Fatalf("import: exit %d, stderr %q", code, stderr)
		}
		if entries, _ := os.ReadDir(out); len(entries) != 1 || entries[0].Name() != "ls40.toml" {
			t.Errorf("wrote %v, want ls40.toml alone", entries)
		}
	})
	t.Run("check NVIDIA's Helm ConfigMap", func(t *testing.T) {
		cm, err := filepath.Abs("../nvconfig/testdata/nvidia/helm-values-config-map.yaml")
		if err != nil {
			t.Fatal(err)
		}
		out, stderr, code := runResult(t, bin("gpuctk"), "config", "check", "--simulate", "dgx-a100", "--config", cm)
		wantOut := "# --- default\nnvidia.com/gpu: 8 devices\n# --- mig-mixed\nnvidia.com/gpu: 4 devices\nnvidia.com/mig-1g.5gb: 9 devices\nnvidia.com/mig-2g.10gb: 4 devices\nnvidia.com/mig-3g.20gb: 3 devices\n# --- mig-single\n"
		if code != 1 || out != wantOut || !strings.HasSuffix(stderr, "gpuctk: "+cm+": gpuctk-device-plugin refuses 1 of its 3 configurations on this host: mig-single\n") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
		}
	})
	t.Run("envvar", func(t *testing.T) {
		in := write("envvar.yaml", "version: v1\nflags:\n  plugin:\n    deviceListStrategy: envvar\n")
		_, stderr, code := runResult(t, bin("gpuctk"), "config", "import-device-plugin", in)
		if code != 0 || !strings.Contains(stderr, "only gpuctk-runtime understands: run those pods with runtimeClassName: nvidia") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("refused", func(t *testing.T) {
		cfg := write("single.toml", "[kubernetes]\nmig-strategy = \"single\"\n")
		out, stderr, code := runResult(t, bin("gpuctk"), "config", "check", "--simulate", "dgx-a100", "--config", cfg)
		want := `gpuctk: gpuctk-device-plugin refuses this configuration: [kubernetes] mig-strategy "single": GPU 4, GPU 5, GPU 6, GPU 7 in MIG mode but GPU 0, GPU 1, GPU 2, GPU 3 not: use "mixed", or put every GPU in MIG mode` + "\n"
		if code != 1 || out != "" || stderr != want {
			t.Errorf("exit %d, stdout %q, stderr %q\nwant exit 1, %q", code, out, stderr, want)
		}
		// cdi generate and labels go on, saying so.
		for _, args := range [][]string{{"labels"}, {"cdi", "generate", "--output", filepath.Join(dir, "spec.yaml")}} {
			_, stderr, code := runResult(t, bin("gpuctk"), append(args, "--simulate", "dgx-a100", "--config", cfg)...)
			if code != 0 || !strings.Contains(stderr, "gpuctk: warning: gpuctk-device-plugin refuses this configuration: [kubernetes] mig-strategy \"single\"") {
				t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
			}
		}
	})
}
