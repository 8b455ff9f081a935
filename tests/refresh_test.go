package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
)

// TestGenerateIfDriver checks `gpuctk cdi generate --if-driver`, what the
// packaged gpuctk-cdi-refresh.service runs at every boot and driver
// change: on a host whose NVIDIA kernel module is not loaded it exits 0
// with one line on stderr and writes nothing; with the module loaded it
// writes the spec as plain generate does.
func TestGenerateIfDriver(t *testing.T) {
	p, err := inventory.LoadProfile("l40s")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// driverRoot makes the root; hostFile is for the NVML double.
		driverRoot func(t *testing.T) (root, hostFile string)
		loaded     bool
	}{
		{"no driver at all", func(t *testing.T) (string, string) { return t.TempDir(), "" }, false},
		{"driver installed, module not loaded", func(t *testing.T) (string, string) { return nvmlRoot(t, p) }, false},
		{"driver loaded", func(t *testing.T) (string, string) {
			root, hostFile := nvmlRoot(t, p)
			version := filepath.Join(root, "proc/driver/nvidia/version")
			if err := os.MkdirAll(filepath.Dir(version), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(version, []byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+p.DriverVersion+"\n"), 0o444); err != nil {
				t.Fatal(err)
			}
			return root, hostFile
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root, hostFile := tc.driverRoot(t)
			out := filepath.Join(t.TempDir(), "cdi", "nvidia.yaml")
			cmd := exec.Command(bin("gpuctk"), "cdi", "generate", "--if-driver", "--config", writeConfig(t, ""),
				"--driver-root", root, "--output", out)
			cmd.Env = append(os.Environ(), fakenvml.EnvVar+"="+hostFile)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("generate --if-driver: %v\n%s", err, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout is not empty: %q", stdout.String())
			}
			errLines := lines(stderr.String())
			if len(errLines) != 1 {
				t.Fatalf("stderr has %d lines, want 1: %q", len(errLines), stderr.String())
			}
			_, statErr := os.Stat(out)
			if !tc.loaded {
				want := "gpuctk: no NVIDIA driver loaded (" + root + "/proc/driver/nvidia/version does not exist): no spec written"
				if errLines[0] != want {
					t.Errorf("stderr\n got %q\nwant %q", errLines[0], want)
				}
				if statErr == nil {
					t.Errorf("%s was written on a host without a driver", out)
				}
				return
			}
			if !strings.HasPrefix(errLines[0], "gpuctk: wrote nvidia.com/gpu spec to "+out+": 4 GPUs") {
				t.Errorf("stderr is %q, want the written-spec summary", errLines[0])
			}
			if statErr != nil {
				t.Errorf("spec not written: %v", statErr)
			}
		})
	}
}
