package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMIGApplyWhilePluginRuns: `gpuctk mig apply` gives a node a new MIG
// layout while the shipped device plugin runs. The plugin sees the spec
// change, reads the host again, and advertises the new MIG devices (and
// no longer the whole GPUs that are gone) without a restart; the spec in
// its CDI dir ends as `gpuctk cdi generate` writes it for the new layout.
func TestMIGApplyWhilePluginRuns(t *testing.T) {
	host := simulatedProfile(t, "dgx-a100")
	cdiDir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("[kubernetes]\nmig-strategy = \"mixed\"\n[mps]\nstate-root = \""+t.TempDir()+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logs, stream := runPlugin(t, "nvidia.com/mig-1g.5gb", nil, "--config", cfg, "--simulate", host, "--cdi-dir", cdiDir)
	count := func() int {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("ListAndWatch: %v", err)
		}
		return len(resp.Devices)
	}
	if n := count(); n != 9 {
		t.Fatalf("before the apply: %d devices of nvidia.com/mig-1g.5gb, want dgx-a100's 9", n)
	}

	spec := filepath.Join(cdiDir, "nvidia.yaml")
	apply := exec.Command(bin("gpuctk"), "mig", "apply", "-c", "all-1g.5gb", "--simulate", host, "--config", cfg, "--output", spec)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("gpuctk mig apply: %v\n%s", err, out)
	}
	if n := count(); n != 56 {
		t.Errorf("after the apply: %d devices of nvidia.com/mig-1g.5gb, want 56 (7 on each of 8 A100s)", n)
	}
	for _, want := range []string{"the CDI spec was changed by another writer: reading the host again", "reloaded after the spec changed",
		"resource no longer offered\" resource=nvidia.com/gpu", "resource no longer offered\" resource=nvidia.com/mig-3g.20gb"} {
		waitLog(t, logs, want)
	}
	gen := exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", host, "--config", cfg)
	want, err := gen.Output()
	if err != nil {
		t.Fatalf("gpuctk cdi generate: %v", err)
	}
	if got, err := os.ReadFile(spec); err != nil || string(got) != string(want) {
		t.Errorf("the spec after the apply is not what cdi generate writes for the new layout (err %v)", err)
	}
}

// waitLog waits up to 10 s for a line containing want in logs.
func waitLog(t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(logs.String(), want) {
			return
		}
	}
	t.Errorf("the plugin did not log %q", want)
}
