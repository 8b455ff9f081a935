package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateWarmsRuntimeCache: `gpuctk cdi generate` into one of the
// runtime's spec dirs fills gpuctk-runtime's cache, so the first create
// after the spec changed reads it instead of resolving the spec; a spec
// rewritten by anything else still makes the first create resolve it.
func TestGenerateWarmsRuntimeCache(t *testing.T) {
	dir := t.TempDir()
	specDir, cache, log := filepath.Join(dir, "cdi"), filepath.Join(dir, "cache"), filepath.Join(dir, "gpuctk-runtime.log")
	cfg := writeConfig(t, fmt.Sprintf("[cdi]\nspec-dirs = [%q]\n[runtime]\nruntimes = [\"/bin/true\"]\nlog-file = %q\ncache-dir = %q\n", specDir, log, cache))
	spec := filepath.Join(specDir, "nvidia.yaml")
	generate := func(profile string) {
		t.Helper()
		run(t, bin("gpuctk"), "cdi", "generate", "--simulate", profile, "--config", cfg, "--output", spec)
	}
	// A create of GPU 0 that returns what the runtime logged.
	bundle := filepath.Join(dir, "bundle")
	os.Mkdir(bundle, 0o755)
	config := map[string]any{"ociVersion": "1.0.2", "process": map[string]any{"args": []string{"sh"}, "cwd": "/",
		"env": []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"}}, "root": map[string]any{"path": "rootfs"}}
	data, _ := json.Marshal(config)
	create := func() string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(log)
		cmd := exec.Command(bin("gpuctk-runtime"), "create", "--bundle", bundle, "ctr")
		cmd.Env = append(os.Environ(), "GPUCTK_CONFIG="+cfg, "GPUCTK_LOG_LEVEL=debug")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gpuctk-runtime create: %v\n%s", err, out)
		}
		after, _ := os.ReadFile(log)
		return string(after[len(before):])
	}
	const miss = "device cache: no entry"

	generate("h100")
	// The runtime makes its cache folder at its first create; from then
	// on, generate fills it.
	if l := create(); !strings.Contains(l, miss) {
		t.Fatalf("the first create of all found a cache entry:\n%s", l)
	}
	generate("dgx-h100-mig")
	if l := create(); strings.Contains(l, miss) || !strings.Contains(l, "injected nvidia.com/gpu=0 ") {
		t.Errorf("the first create after cdi generate changed the spec resolved it again:\n%s", l)
	}
	// A spec changed by something else: resolved by the first create.
	other, _ := os.ReadFile(filepath.Join("..", "cdi", "testdata", "h100.yaml"))
	if err := os.WriteFile(spec, other, 0o644); err != nil {
		t.Fatal(err)
	}
	if l := create(); !strings.Contains(l, miss) {
		t.Errorf("a spec gpuctk did not write was found in the cache:\n%s", l)
	}
}
