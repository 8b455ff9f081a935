package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigImportOutputDir converts NVIDIA's Helm ConfigMap (two keys)
// into one file per key, all or none: found in review, a second file that
// could not be written left the first one written.
func TestConfigImportOutputDir(t *testing.T) {
	configMap, err := filepath.Abs("../nvconfig/testdata/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("written", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "configs")
		_, stderr, code := runResult(t, bin("gpuctk"), "config", "import-device-plugin", "--output-dir", dir, configMap)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, key := range []string{"a100-mps", "default"} {
			p := filepath.Join(dir, key+".toml")
			data, err := os.ReadFile(p)
			if err != nil || !strings.Contains(stderr, "wrote "+p+"\n") {
				t.Errorf("%s: %v; stderr %q", p, err, stderr)
				continue
			}
			// What it wrote is a configuration gpuctk reads.
			if _, stderr, code := runResult(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--config", p, "--output", filepath.Join(t.TempDir(), "spec.yaml")); code != 0 {
				t.Errorf("%s (%s) does not load: %s", p, data, stderr)
			}
		}
	})
	t.Run("second fails", func(t *testing.T) {
		dir := t.TempDir()
		// "a100-mps" sorts first; a folder where "default" goes.
		if err := os.Mkdir(filepath.Join(dir, "default.toml"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := runResult(t, bin("gpuctk"), "config", "import-device-plugin", "--output-dir", dir, configMap)
		want := "gpuctk: write " + filepath.Join(dir, "default.toml") + ": it is a folder, not a file: name a file to write (none of the 2 files written)\n"
		if code != 1 || stderr != want {
			t.Errorf("exit %d, stderr %q\nwant exit 1, %q", code, stderr, want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("the folder holds %v: want the planted folder alone", entries)
		}
	})
}

// TestConfigImportManyKeys: a ConfigMap of 300 keys is written by a
// gpuctk allowed 64 descriptors (prlimit): found in review, a folder
// descriptor was kept per file, so 5,000 keys failed under ulimit -n 1024.
func TestConfigImportManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: many\ndata:\n")
	for i := range 300 {
		fmt.Fprintf(&b, "  key-%03d: |-\n    version: v1\n    flags:\n      migStrategy: none\n", i)
	}
	configMap := filepath.Join(t.TempDir(), "configmap.yaml")
	if err := os.WriteFile(configMap, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, stderr, code := runResult(t, "prlimit", "--nofile=64:64", bin("gpuctk"), "config", "import-device-plugin", "--output-dir", dir, configMap)
	entries, _ := os.ReadDir(dir)
	if code != 0 || len(entries) != 300 {
		t.Errorf("exit %d, %d files written: %.500s", code, len(entries), stderr)
	}
}
