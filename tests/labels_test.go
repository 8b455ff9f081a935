package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLabels runs `gpuctk labels` as a node would: key=value lines on
// stdout, or the NFD feature file with --output; bad input is one line and
// a non-zero exit with nothing written.
func TestLabels(t *testing.T) {
	out := run(t, bin("gpuctk"), "labels", "--simulate", "dgx-a100", "--config", writeConfig(t, "[kubernetes]\nmig-strategy = \"mixed\"\n"))
	for _, want := range []string{"nvidia.com/gpu.count=8\n", "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\n", "nvidia.com/mig-1g.5gb.count=9\n", "nvidia.com/mig.strategy=mixed\n", "nvidia.com/cuda.driver.major=580\n", "nvidia.com/cuda.driver-version.full=580.65.06\n", "nvidia.com/cuda.runtime-version.full=13.0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("labels lack %q:\n%s", want, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "features.d")
	run(t, bin("gpuctk"), "labels", "--simulate", "l40s", "--output", dir)
	data, err := os.ReadFile(filepath.Join(dir, "gpuctk"))
	if err != nil || !strings.Contains(string(data), "nvidia.com/gpu.count=4\n") {
		t.Fatalf("feature file: %v\n%s", err, data)
	}

	bad := filepath.Join(t.TempDir(), "features.d")
	cmd := exec.Command(bin("gpuctk"), "labels", "--simulate", "l40s", "--output", bad, "--config", writeConfig(t, "[kubernetes]\nmig-strategy = \"mixd\"\n"))
	b, err := cmd.CombinedOutput()
	if err == nil || strings.Count(strings.TrimSpace(string(b)), "\n") != 0 || !strings.Contains(string(b), `[kubernetes] "mig-strategy" value "mixd" is not known`) {
		t.Errorf("bad strategy: %v: %s", err, b)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Error("a bad config still wrote the feature file")
	}
}

// TestInfo checks gpuctk info's screen: driver, GPUs with their MIG
// layouts and sharing, the specs found and the MPS daemons.
func TestInfo(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "[cdi]\nspec-dirs = [\""+dir+"\"]\n[mps]\nstate-root = \""+t.TempDir()+"\"\n[[sharing]]\ndevices = [\"1\"]\nstrategy = \"time-slicing\"\nreplicas = 3\n[[sharing]]\ndevices = [\"mig-0\"]\nstrategy = \"mps\"\nreplicas = 2\n")
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--config", cfg, "--output", filepath.Join(dir, "nvidia.yaml"))
	out := run(t, bin("gpuctk"), "info", "--simulate", "dgx-a100", "--config", cfg)
	for _, want := range []string{"580.65.06, CUDA 13.0 (simulated dgx-a100)", "8 GPUs", "shared: time-slicing x3", "MIG: 7 x 1g.5gb",
		"mig-0 (1g.5gb) mps x2", filepath.Join(dir, "nvidia.yaml") + " (", "mig-0 not running"} {
		if !strings.Contains(out, want) {
			t.Errorf("info lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n > 24 {
		t.Errorf("info takes %d lines, more than one screen", n)
	}
}
