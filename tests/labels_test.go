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
	for _, want := range []string{"nvidia.com/gpu.count=8\n", "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\n", "nvidia.com/mig-1g.5gb.count=9\n", "nvidia.com/mig.strategy=mixed\n", "nvidia.com/cuda.driver.major=580\n"} {
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
