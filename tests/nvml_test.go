package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
)

var (
	fakeNVMLOnce sync.Once
	fakeNVML     string
	fakeNVMLErr  error
)

// nvmlRoot builds a fake driver root for a profile whose libnvidia-ml is
// the NVML test double, installed as a driver installs it: the file
// libnvidia-ml.so.<driver version>, its SONAME link and the linker cache
// made by the real ldconfig. It returns the root and the host file the
// library reads (set through fakenvml.EnvVar by the caller).
func nvmlRoot(t *testing.T, p *inventory.Profile, faults ...fakenvml.Fault) (root, hostFile string) {
	t.Helper()
	root = t.TempDir()
	if err := fakehost.Build(root, p); err != nil {
		t.Fatal(err)
	}
	lib, err := os.ReadFile(fakeNVMLLibrary(t))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, fakehost.LibDir, "libnvidia-ml.so."+p.DriverVersion)
	if err := os.WriteFile(dst, lib, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "ldconfig", "-r", root)
	// The library must be found through the root's linker cache.
	if out := run(t, "ldconfig", "-r", root, "-p"); !strings.Contains(out, "libnvidia-ml.so.1 (") {
		t.Fatalf("ldconfig -r %s -p does not list libnvidia-ml.so.1:\n%s", root, out)
	}
	return root, nvmlHostFile(t, p, faults...)
}

// fakeNVMLLibrary returns the NVML test double, built once per run.
func fakeNVMLLibrary(t *testing.T) string {
	t.Helper()
	fakeNVMLOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpuctk-fakenvml-")
		if err != nil {
			fakeNVMLErr = err
			return
		}
		fakeNVML = filepath.Join(dir, fakenvml.SONAME)
		fakeNVMLErr = fakenvml.Build(fakeNVML)
	})
	if fakeNVMLErr != nil {
		t.Fatal(fakeNVMLErr)
	}
	return fakeNVML
}

// nvmlHostFile writes the host the NVML test double describes: a
// profile's, with faults.
func nvmlHostFile(t *testing.T, p *inventory.Profile, faults ...fakenvml.Fault) string {
	t.Helper()
	h, err := p.Host()
	if err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(t.TempDir(), "nvml-host")
	if err := fakenvml.WriteFile(hostFile, h, faults...); err != nil {
		t.Fatal(err)
	}
	return hostFile
}

// nvmlGenerate runs gpuctk cdi generate with JSON output and an empty config,
// with hostFile (if any) given to the fake NVML, and returns stdout,
// stderr and whether it succeeded.
func nvmlGenerate(t *testing.T, hostFile string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin("gpuctk"), append([]string{"cdi", "generate", "--format", "json", "--config", cfg}, args...)...)
	cmd.Env = append(os.Environ(), fakenvml.EnvVar+"="+hostFile)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatal(err)
	}
	return out.String(), errb.String(), err == nil
}

func nvmlDeviceNames(t *testing.T, spec string) []string {
	t.Helper()
	var s struct {
		Devices []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("spec is not JSON: %v\n%s", err, spec)
	}
	var names []string
	for _, d := range s.Devices {
		// Offered devices only: the capability devices follow the
		// driver files (a standard install has them all, the small fake
		// root none).
		if !strings.HasPrefix(d.Name, "capability-") {
			names = append(names, d.Name)
		}
	}
	slices.Sort(names)
	return names
}

// TestNVMLMatchesSimulate runs the shipped gpuctk on its production path
// (no --simulate: libnvidia-ml.so.1 found in the driver root's linker
// cache, loaded by go-nvml) against the NVML test double describing each
// embedded profile, and checks it offers the devices --simulate offers;
// with the same roots the whole spec is the same.
func TestNVMLMatchesSimulate(t *testing.T) {
	for _, name := range inventory.Profiles() {
		t.Run(name, func(t *testing.T) {
			p, err := inventory.LoadProfile(name)
			if err != nil {
				t.Fatal(err)
			}
			root, hostFile := nvmlRoot(t, p)
			roots := []string{"--driver-root", root, "--dev-root", root}

			real, stderr, ok := nvmlGenerate(t, hostFile, roots...)
			if !ok {
				t.Fatalf("generate over NVML failed: %s", stderr)
			}
			sim, stderr, ok := nvmlGenerate(t, "", "--simulate", name)
			if !ok {
				t.Fatalf("generate --simulate %s failed: %s", name, stderr)
			}
			got, want := nvmlDeviceNames(t, real), nvmlDeviceNames(t, sim)
			if !slices.Equal(got, want) {
				t.Errorf("devices over NVML differ from --simulate %s:\n got %v\nwant %v", name, got, want)
			}
			simRoot, stderr, ok := nvmlGenerate(t, "", append([]string{"--simulate", name}, roots...)...)
			if !ok {
				t.Fatalf("generate --simulate %s with roots failed: %s", name, stderr)
			}
			if real != simRoot {
				t.Errorf("spec over NVML differs from --simulate %s with the same roots:\n got %s\nwant %s", name, real, simRoot)
			}
		})
	}
}

// TestNVMLFailures checks that NVML failures stop generate with one line
// that says what failed, and write nothing.
func TestNVMLFailures(t *testing.T) {
	p, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		faults []fakenvml.Fault
		noHost bool
		want   string
	}{
		{name: "init fails", faults: []fakenvml.Fault{{Function: "nvmlInit_v2", GPU: -1, Return: nvml.ERROR_UNKNOWN}},
			want: "): Unknown Error: is the NVIDIA driver installed? use --driver-root or --simulate"},
		{name: "driver not loaded", noHost: true,
			want: "): Driver Not Loaded: is the NVIDIA driver installed? use --driver-root or --simulate"},
		{name: "MIG query fails on one GPU", faults: []fakenvml.Fault{{Function: "nvmlDeviceGetMigDeviceHandleByIndex", GPU: 5, Return: nvml.ERROR_UNKNOWN}},
			want: "gpuctk: NVML: GPU 5: MIG device 0: handle: Unknown Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, hostFile := nvmlRoot(t, p, tc.faults...)
			if tc.noHost {
				hostFile = ""
			}
			out := filepath.Join(t.TempDir(), "nvidia.json")
			stdout, stderr, ok := nvmlGenerate(t, hostFile, "--driver-root", root, "--dev-root", root, "--output", out)
			if ok {
				t.Fatalf("generate succeeded:\n%s", stdout)
			}
			if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); len(lines) != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr = %q, want one line containing %q", stderr, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s was written", out)
			}
		})
	}

	t.Run("library missing", func(t *testing.T) {
		root := t.TempDir()
		if err := fakehost.Build(root, p); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"libnvidia-ml.so.1", "libnvidia-ml.so." + p.DriverVersion} {
			if err := os.Remove(filepath.Join(root, fakehost.LibDir, f)); err != nil {
				t.Fatal(err)
			}
		}
		run(t, "ldconfig", "-r", root)
		_, stderr, ok := nvmlGenerate(t, "", "--driver-root", root, "--dev-root", root)
		if ok || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "libnvidia-ml.so.1 not found under driver root") {
			t.Errorf("ok = %v, stderr = %q; want one line saying libnvidia-ml.so.1 is missing", ok, stderr)
		}
	})
}
