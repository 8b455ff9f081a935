package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/mig"
	"github.com/gpuctk/gpuctk/tests/fakehost"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
)

// gpuctkRun runs the built gpuctk with an empty config and returns its
// stdout, stderr and exit code.
func gpuctkRun(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("[mps]\nstate-root = \""+t.TempDir()+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(args[:2:2], append([]string{"--config", cfg}, args[2:]...)...)
	cmd := exec.Command(bin("gpuctk"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// simulatedProfile copies an embedded profile to a file that apply may
// rewrite.
func simulatedProfile(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".toml")
	copyFile(t, filepath.Join("..", "inventory", "profiles", name+".toml"), path, 0o644)
	return path
}

// TestMIGApplySimulated applies a built-in layout to a simulated host file
// with the shipped binary: the plan is printed, the spec regenerated with
// the new MIG devices, `cdi generate --simulate FILE` shows them, assert
// agrees, and a second apply changes nothing (not even the spec).
func TestMIGApplySimulated(t *testing.T) {
	host := simulatedProfile(t, "dgx-a100")
	spec := filepath.Join(t.TempDir(), "nvidia.yaml")
	out, errs, code := gpuctkRun(t, nil, "mig", "apply", "-c", "all-balanced", "--simulate", host, "--output", spec)
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "GPU 0 (NVIDIA A100-SXM4-40GB, GPU-13fe3248-4da8-65f8-e972-3f15eef51793): MIG disabled -> MIG enabled: 2 x 1g.5gb, 1 x 2g.10gb, 1 x 3g.20gb\n  set MIG mode enabled\n  create GPU instance 2 (3g.20gb, memory slices 4-7)") {
		t.Errorf("plan:\n%s", out)
	}
	if !strings.Contains(errs, "8 GPUs, 32 MIG devices, 0 replicas") {
		t.Errorf("spec not regenerated with 32 MIG devices: %s", errs)
	}
	gen, errs, code := gpuctkRun(t, nil, "cdi", "generate", "--simulate", host, "--format", "json")
	if code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	names := nvmlDeviceNames(t, gen)
	for _, want := range []string{"0:0", "0:3", "mig-0", "mig-31", "7:3"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("spec lacks %s: %v", want, names)
		}
	}
	if _, _, code := gpuctkRun(t, nil, "mig", "assert", "-c", "all-balanced", "--simulate", host); code != 0 {
		t.Errorf("assert after apply: exit %d", code)
	}
	out, _, code = gpuctkRun(t, nil, "mig", "assert", "-c", "all-1g.5gb", "--simulate", host)
	if code != 1 || strings.Count(out, "\n") != 8 || !strings.Contains(out, `GPU 3 (NVIDIA A100-SXM4-40GB, GPU-62dcf677-cc5f-d6b0-7fe5-3a9f7a23bd87): has MIG enabled: 2 x 1g.5gb, 1 x 2g.10gb, 1 x 3g.20gb; config "all-1g.5gb" wants MIG enabled: 7 x 1g.5gb`) {
		t.Errorf("assert of another layout: exit %d:\n%s", code, out)
	}
	before, _ := os.Stat(spec)
	hostBefore, _ := os.ReadFile(host)
	time.Sleep(10 * time.Millisecond)
	out, _, code = gpuctkRun(t, nil, "mig", "apply", "-c", "all-balanced", "--simulate", host, "--output", spec)
	if code != 0 || out != "the GPUs already have MIG config \"all-balanced\": nothing to change\n" {
		t.Errorf("second apply: exit %d:\n%s", code, out)
	}
	if after, _ := os.Stat(spec); !after.ModTime().Equal(before.ModTime()) {
		t.Error("second apply rewrote the spec")
	}
	if after, _ := os.ReadFile(host); string(after) != string(hostBefore) {
		t.Error("second apply rewrote the host file")
	}
	exported, _, code := gpuctkRun(t, nil, "mig", "export", "--simulate", host)
	if code != 0 || !strings.Contains(exported, "    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.5gb\": 2\n        \"2g.10gb\": 1\n        \"3g.20gb\": 1\n") {
		t.Errorf("export: exit %d:\n%s", code, exported)
	}
}

// TestMIGApplyLocked: while another apply holds the host's MIG lock, apply
// is refused in one line naming that apply and the lock, and changes
// neither the host nor the spec; once it lets go, the same apply goes
// through. A dry run does not need the lock.
func TestMIGApplyLocked(t *testing.T) {
	host := simulatedProfile(t, "dgx-a100")
	spec := filepath.Join(t.TempDir(), "nvidia.yaml")
	if err := os.WriteFile(spec, []byte("old spec\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(host)
	release, err := mig.Lock(host + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"mig", "apply", "-c", "all-balanced", "--simulate", host, "--output", spec}
	_, errs, code := gpuctkRun(t, nil, args...)
	want := fmt.Sprintf("gpuctk: another gpuctk mig apply (pid %d) is changing the MIG layout (it holds %s.lock): nothing was changed; run apply again once it has finished\n", os.Getpid(), host)
	if code != 1 || errs != want {
		t.Errorf("apply while locked: exit %d, stderr %q, want %q", code, errs, want)
	}
	if after, _ := os.ReadFile(host); string(after) != string(before) {
		t.Error("the host file changed")
	}
	if s, _ := os.ReadFile(spec); string(s) != "old spec\n" {
		t.Error("the spec changed")
	}
	if out, errs, code := gpuctkRun(t, nil, append(args, "--dry-run")...); code != 0 || !strings.Contains(out, "set MIG mode enabled") {
		t.Errorf("dry run while locked: exit %d: %s%s", code, out, errs)
	}
	release()
	if _, errs, code := gpuctkRun(t, nil, args...); code != 0 || !strings.Contains(errs, "32 MIG devices") {
		t.Errorf("apply after the lock was let go: exit %d: %s", code, errs)
	}
}

// nvidiaConfig copies NVIDIA's config-default.yaml, as the GPU operator
// mounts it, to a file of the test's, as an operator would have it.
func nvidiaConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config-default.yaml")
	copyFile(t, filepath.Join("..", "mig", "configs", "config-default.yaml"), path, 0o644)
	return path
}

// TestMIGApplyNVIDIAConfig applies layouts of NVIDIA's config-default.yaml
// given with -f: all-balanced, whose entries select GPUs by PCI device id,
// and all-1g.5gb, on the simulated hosts of each model.
func TestMIGApplyNVIDIAConfig(t *testing.T) {
	file := nvidiaConfig(t)
	for _, tc := range []struct {
		profile, layout string
		want            string // each GPU's MIG devices afterwards, by profile
		devices         int
	}{
		{"dgx-a100", "all-balanced", "1g.5gb 1g.5gb 2g.10gb 3g.20gb", 32},
		{"dgx-a100", "all-1g.5gb", "1g.5gb 1g.5gb 1g.5gb 1g.5gb 1g.5gb 1g.5gb 1g.5gb", 56},
		{"h100", "all-balanced", "1g.10gb 1g.10gb 2g.20gb 3g.40gb", 4},
		{"dgx-h100-mig", "all-balanced", "1g.10gb 1g.10gb 2g.20gb 3g.40gb", 32},
	} {
		t.Run(tc.profile+"/"+tc.layout, func(t *testing.T) {
			host := simulatedProfile(t, tc.profile)
			spec := filepath.Join(t.TempDir(), "nvidia.yaml")
			_, errs, code := gpuctkRun(t, nil, "mig", "apply", "-f", file, "-c", tc.layout, "--simulate", host, "--output", spec)
			if code != 0 || !strings.Contains(errs, fmt.Sprintf(" %d MIG devices", tc.devices)) {
				t.Fatalf("apply: exit %d: %s", code, errs)
			}
			p, err := inventory.LoadProfile(host)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range p.GPUs {
				var got []string
				for _, d := range g.MIG {
					got = append(got, d.Profile)
				}
				slices.Sort(got)
				if !g.MIGEnabled || strings.Join(got, " ") != tc.want {
					t.Errorf("GPU %d: MIG %v, devices %v, want %s", g.Index, g.MIGEnabled, got, tc.want)
				}
			}
			if _, errs, code := gpuctkRun(t, nil, "mig", "assert", "-f", file, "-c", tc.layout, "--simulate", host); code != 0 {
				t.Errorf("assert after apply: exit %d: %s", code, errs)
			}
		})
	}
	// all-1g.35gb is for H200 and GB300 GPUs: an A100 host is left as is,
	// and told so.
	host := simulatedProfile(t, "dgx-a100")
	before, _ := os.ReadFile(host)
	out, errs, code := gpuctkRun(t, nil, "mig", "apply", "-f", file, "-c", "all-1g.35gb", "--simulate", host, "--output", filepath.Join(t.TempDir(), "nvidia.yaml"))
	if code != 0 || !strings.HasPrefix(out, `MIG config "all-1g.35gb" selects none of the GPUs`) {
		t.Errorf("layout for other models: exit %d: %s%s", code, out, errs)
	}
	if after, _ := os.ReadFile(host); string(after) != string(before) {
		t.Error("the host file changed")
	}
}

// TestMIGBadInput checks that each refusal is one line, a non-zero exit,
// and leaves the host file and the spec as they were.
func TestMIGBadInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string
		args    func(t *testing.T) []string
		want    string
	}{
		{"no layout", "dgx-a100", func(*testing.T) []string { return nil }, "no layout chosen: give -c NAME"},
		{"unknown layout", "dgx-a100", func(*testing.T) []string { return []string{"-c", "all-9g"} }, `MIG config embedded config has no config "all-9g": use one of all-1g.10gb, `},
		{"profile the GPU lacks", "h100", func(*testing.T) []string { return []string{"-c", "all-1g.5gb"} }, `GPU 0 (NVIDIA H100 80GB HBM3): profile 1g.5gb is not one of the H100-80GB's:`},
		{"GPU without MIG", "l40s", func(*testing.T) []string { return []string{"-c", "all-enabled"} }, "GPU 0 (NVIDIA L40S): gpuctk has no MIG model data for the NVIDIA L40S (PCI device id 0x26B910DE)"},
		{"too many slices", "dgx-a100", func(t *testing.T) []string {
			f := filepath.Join(t.TempDir(), "mig.yaml")
			os.WriteFile(f, []byte("version: v1\nmig-configs:\n  big:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"4g.20gb\": 2}\n"), 0o644)
			return []string{"-f", f, "-c", "big"}
		}, `config "big" entry 1: GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled: 2 x 4g.20gb needs 8 compute slices; the A100-40GB has 7`},
		{"device-filter not hex", "dgx-a100", func(t *testing.T) []string {
			f := filepath.Join(t.TempDir(), "mig.yaml")
			os.WriteFile(f, []byte("version: v1\nmig-configs:\n  a:\n    - devices: all\n      device-filter: [\"0x20B0\"]\n      mig-enabled: false\n"), 0o644)
			return []string{"-f", f, "-c", "a"}
		}, `config "a" entry 1: field device-filter: line 5: "0x20B0" is not a PCI device id of eight hex digits: write the device and vendor ids as 0x and eight hex digits, such as 0x20B010DE`},
		{"NVIDIA's layout for a profile the GPU lacks", "dgx-a100", func(t *testing.T) []string {
			return []string{"-f", nvidiaConfig(t), "-c", "all-1g.18gb"}
		}, `config "all-1g.18gb" entry 1: GPU 0 (NVIDIA A100-SXM4-40GB): profile 1g.18gb is not one of the A100-40GB's: 1g.5gb,`},
		{"unknown field", "dgx-a100", func(t *testing.T) []string {
			f := filepath.Join(t.TempDir(), "mig.yaml")
			os.WriteFile(f, []byte("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-device: {}\n"), 0o644)
			return []string{"-f", f, "-c", "a"}
		}, `config "a" entry 1: line 6: unknown field "mig-device"`},
		{"config file missing", "dgx-a100", func(*testing.T) []string { return []string{"-f", "/nonexistent/mig.yaml", "-c", "a"} }, "MIG config: open /nonexistent/mig.yaml: no such file or directory"},
		{"unknown flag", "dgx-a100", func(*testing.T) []string { return []string{"-c", "all-1g.5gb", "--force"} }, `unknown flag "force"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := simulatedProfile(t, tc.profile)
			spec := filepath.Join(t.TempDir(), "nvidia.yaml")
			os.WriteFile(spec, []byte("old spec\n"), 0o644)
			before, _ := os.ReadFile(host)
			_, errs, code := gpuctkRun(t, nil, append([]string{"mig", "apply", "--simulate", host, "--output", spec}, tc.args(t)...)...)
			// A usage mistake adds where the usage is, on a line of its own.
			errs = strings.Replace(errs, "Run 'gpuctk mig apply --help' for usage.\n", "", 1)
			if code == 0 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q, want one line containing %q", code, errs, tc.want)
			}
			if after, _ := os.ReadFile(host); string(after) != string(before) {
				t.Error("the host file changed")
			}
			if s, _ := os.ReadFile(spec); string(s) != "old spec\n" {
				t.Error("the spec changed")
			}
		})
	}
	// An embedded profile cannot be rewritten.
	_, errs, code := gpuctkRun(t, nil, "mig", "apply", "--simulate", "dgx-a100", "-c", "all-1g.5gb")
	if code == 0 || !strings.Contains(errs, "--simulate dgx-a100 is an embedded profile, which apply cannot change") {
		t.Errorf("embedded profile: exit %d: %s", code, errs)
	}
}

// simulatedApplyRoot applies layout to a copy of an embedded profile and
// returns the spec written and a dev root of the host after the change,
// with the MIG capability nodes that a driver makes as instances appear.
func simulatedApplyRoot(t *testing.T, profile, layout string) (spec, devRoot string) {
	t.Helper()
	simHost := simulatedProfile(t, profile)
	spec = filepath.Join(t.TempDir(), "sim.json")
	if _, errs, code := gpuctkRun(t, nil, "mig", "apply", "-c", layout, "--simulate", simHost, "--output", spec); code != 0 {
		t.Fatalf("simulated apply: %s", errs)
	}
	after, err := inventory.LoadProfile(simHost)
	if err != nil {
		t.Fatal(err)
	}
	devRoot = t.TempDir()
	if err := fakehost.Build(devRoot, after); err != nil {
		t.Fatal(err)
	}
	return spec, devRoot
}

// TestMIGApplyNVML runs the shipped gpuctk on its production path against
// the NVML test double: apply changes the MIG layout through go-nvml and
// writes the spec from what NVML then reports, which offers the devices
// the same apply on a simulated host offers; assert agrees afterwards.
func TestMIGApplyNVML(t *testing.T) {
	before, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	simSpec, devRoot := simulatedApplyRoot(t, "dgx-a100", "all-balanced")
	root, hostFile := nvmlRoot(t, before)
	env := []string{fakenvml.EnvVar + "=" + hostFile}
	// The lock of the host's MIG layout goes with the test's host, not
	// this machine's /run.
	roots := []string{"--driver-root", root, "--dev-root", devRoot}
	lock := []string{"--lock", filepath.Join(t.TempDir(), "mig.lock")}
	spec := filepath.Join(t.TempDir(), "nvidia.json")
	out, errs, code := gpuctkRun(t, env, append(append([]string{"mig", "apply", "-c", "all-balanced", "--output", spec}, roots...), lock...)...)
	if code != 0 {
		t.Fatalf("apply over NVML: exit %d: %s\n%s", code, errs, out)
	}
	if !strings.Contains(errs, "8 GPUs, 32 MIG devices, 0 replicas") {
		t.Errorf("spec: %s", errs)
	}
	nvmlSpec, _ := os.ReadFile(spec)
	simulated, _ := os.ReadFile(simSpec)
	indexNames := func(spec string) []string {
		var out []string
		for _, n := range nvmlDeviceNames(t, spec) {
			if !strings.HasPrefix(n, "MIG-") {
				out = append(out, n)
			}
		}
		return out
	}
	if got, want := indexNames(string(nvmlSpec)), indexNames(string(simulated)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("devices over NVML %v, simulated %v", got, want)
	}
	if _, errs, code := gpuctkRun(t, env, append([]string{"mig", "assert", "-c", "all-balanced"}, roots...)...); code != 0 {
		t.Errorf("assert over NVML: exit %d: %s", code, errs)
	}
	out, _, code = gpuctkRun(t, env, append(append([]string{"mig", "apply", "-c", "all-balanced", "--output", spec}, roots...), lock...)...)
	if code != 0 || !strings.Contains(out, "nothing to change") {
		t.Errorf("second apply over NVML: exit %d: %s", code, out)
	}

	// NVIDIA's own generator, on the same NVML, offers the same MIG
	// devices by GPU:MIG index and UUID. It reads the MIG minors from the
	// host's /proc whatever its --dev-root, so it runs in a mount
	// namespace of its own with the dev root's file there.
	ctk := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs /proc/driver && mkdir /proc/driver/nvidia-caps && cp "$1" /proc/driver/nvidia-caps/mig-minors && shift && exec "$@"`,
		"sh", filepath.Join(devRoot, "proc/driver/nvidia-caps/mig-minors"),
		tool(t, "nvidia-ctk"), "cdi", "generate", "--format", "json", "--mode", "nvml",
		"--driver-root", root, "--dev-root", devRoot, "--device-name-strategy", "index", "--device-name-strategy", "uuid")
	ctk.Env = append(os.Environ(), env...)
	var ctkOut, ctkErr strings.Builder
	ctk.Stdout, ctk.Stderr = &ctkOut, &ctkErr
	if err := ctk.Run(); err != nil {
		t.Fatalf("nvidia-ctk cdi generate: %v\n%s", err, ctkErr.String())
	}
	var theirs []string
	for _, n := range nvmlDeviceNames(t, ctkOut.String()) {
		if strings.Contains(n, ":") || strings.HasPrefix(n, "MIG-") {
			theirs = append(theirs, n)
		}
	}
	var ours []string
	for _, n := range nvmlDeviceNames(t, string(nvmlSpec)) {
		if strings.Contains(n, ":") || strings.HasPrefix(n, "MIG-") {
			ours = append(ours, n)
		}
	}
	if strings.Join(theirs, " ") != strings.Join(ours, " ") || len(ours) != 64 {
		t.Errorf("nvidia-ctk offers MIG devices %v;\ngpuctk offers %v", theirs, ours)
	}
}

// TestMIGApplyNVMLComputeProfileRefused applies all-1g.18gb to an H200
// whose driver refuses the compute instance profile query: apply says so
// in one note, creates the compute instances of NVML's 1-slice profile,
// and the spec offers the 7 MIG devices a simulated apply gives.
func TestMIGApplyNVMLComputeProfileRefused(t *testing.T) {
	before, err := inventory.LoadProfile("h200")
	if err != nil {
		t.Fatal(err)
	}
	simSpec, devRoot := simulatedApplyRoot(t, "h200", "all-1g.18gb")
	root, hostFile := nvmlRoot(t, before, fakenvml.Fault{Function: "nvmlGpuInstanceGetComputeInstanceProfileInfoV", GPU: -1, Return: nvml.ERROR_NO_PERMISSION})
	spec := filepath.Join(t.TempDir(), "nvidia.json")
	out, errs, code := gpuctkRun(t, []string{fakenvml.EnvVar + "=" + hostFile}, "mig", "apply", "-c", "all-1g.18gb", "--output", spec,
		"--driver-root", root, "--dev-root", devRoot, "--lock", filepath.Join(t.TempDir(), "mig.lock"))
	if code != 0 {
		t.Fatalf("apply over NVML: exit %d: %s\n%s", code, errs, out)
	}
	// The code's text is the library's or go-nvml's, whichever is loaded.
	start := "gpuctk: note: GPU " + before.GPUs[0].UUID + ": NVML: compute instance profile 0 of GPU instance 7: "
	end := ": its compute instances take NVML's compute instance profile for their slice count"
	var notes []string
	for _, l := range strings.Split(errs, "\n") {
		if strings.HasPrefix(l, "gpuctk: note:") {
			notes = append(notes, l)
		}
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], start) || !strings.HasSuffix(notes[0], end) || !strings.Contains(errs, "1 GPU, 7 MIG devices, 0 replicas") {
		t.Errorf("stderr:\n%s\nwant one note:\n%s...%s", errs, start, end)
	}
	// MIG device UUIDs are NVML's and the simulator's each.
	names := func(path string) string {
		data, _ := os.ReadFile(path)
		var out []string
		for _, n := range nvmlDeviceNames(t, string(data)) {
			if !strings.HasPrefix(n, "MIG-") {
				out = append(out, n)
			}
		}
		return strings.Join(out, " ")
	}
	if got, want := names(spec), names(simSpec); got != want || !strings.Contains(got, "mig-6") {
		t.Errorf("devices over NVML %s, simulated %s", got, want)
	}
}

// A GPU that an MPS daemon serves keeps its MIG layout: apply refuses it,
// changing no GPU, until `gpuctk mps stop`.
func TestMIGApplyRefusesMPSDevice(t *testing.T) {
	host := simulatedProfile(t, "dgx-a100")
	state := shortStateRoot(t)
	e := newMPSEnv(t, fmt.Sprintf("[mps]\nstate-root = %q\n\n[[sharing]]\ndevices = [\"mig-0\"]\nstrategy = \"mps\"\nreplicas = 2\n", state))
	e.stateRoot = state
	run(t, bin("gpuctk"), e.args("start", host)...)
	before, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	apply := []string{"mig", "apply", "--config", e.config, "-c", "all-balanced", "--simulate", host, "--output", filepath.Join(t.TempDir(), "nvidia.yaml")}
	_, errs, code := runResult(t, bin("gpuctk"), apply...)
	if want := "GPU 4 (GPU-6f55addc-717f-2b39-544e-c541eb7357da): an MPS daemon serves MIG device mig-0 (GPU 4, 1g.5gb) ("; code != 1 || !strings.Contains(errs, want) || !strings.Contains(errs, "stop it with gpuctk mps stop") {
		t.Fatalf("apply with a daemon running: exit %d, %q; want 1 and %q", code, errs, want)
	}
	if after, _ := os.ReadFile(host); !bytes.Equal(after, before) {
		t.Error("apply rewrote the simulated host while refusing")
	}
	run(t, bin("gpuctk"), e.args("stop", host)...)
	if _, errs, code := runResult(t, bin("gpuctk"), apply...); code != 0 {
		t.Fatalf("apply after mps stop: exit %d: %s", code, errs)
	}
}

// TestMIGApplyFinishesSpec: an apply that changed the GPUs but could not
// write the spec (here a [[sharing]] selector of a MIG device the new
// layout lacks) is finished by running apply again once the cause is
// fixed: the spec gets the new layout's MIG devices, not the old ones.
func TestMIGApplyFinishesSpec(t *testing.T) {
	host := simulatedProfile(t, "dgx-a100")
	spec := filepath.Join(t.TempDir(), "nvidia.yaml")
	cfg := filepath.Join(t.TempDir(), "config.toml")
	state := t.TempDir()
	sharing := "[mps]\nstate-root = \"" + state + "\"\n\n[[sharing]]\ndevices = [\"4:6\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"
	if err := os.WriteFile(cfg, []byte(sharing), 0o644); err != nil {
		t.Fatal(err)
	}
	gpuctk := func(args ...string) (string, string, int) {
		return runResult(t, bin("gpuctk"), append(args[:2:2], append([]string{"--config", cfg}, args[2:]...)...)...)
	}
	if _, errs, code := gpuctk("cdi", "generate", "--simulate", host, "--output", spec); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	args := []string{"mig", "apply", "-c", "all-balanced", "--simulate", host, "--output", spec}
	if _, errs, code := gpuctk(args...); code == 0 || !strings.Contains(errs, `selector "4:6" matches no device`) {
		t.Fatalf("apply with a selector the new layout lacks: exit %d: %s", code, errs)
	}
	// The operator fixes the config and runs apply again.
	if err := os.WriteFile(cfg, []byte("[mps]\nstate-root = \""+state+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := gpuctk(args...); code != 0 {
		t.Fatalf("apply again: exit %d: %s", code, errs)
	}
	if _, errs, code := gpuctk("cdi", "check", "--simulate", host, "--spec-dir", filepath.Dir(spec)); code != 0 {
		t.Errorf("the spec is stale after apply ran again: exit %d: %s", code, errs)
	}
	before, _ := os.Stat(spec)
	time.Sleep(10 * time.Millisecond)
	if out, _, code := gpuctk(args...); code != 0 || out != "the GPUs already have MIG config \"all-balanced\": nothing to change\n" {
		t.Errorf("third apply: exit %d:\n%s", code, out)
	}
	if after, _ := os.Stat(spec); !after.ModTime().Equal(before.ModTime()) {
		t.Error("an apply that changed nothing rewrote a fresh spec")
	}
}

// TestMIGApplySimulatedKeepsHostSpec rehearses a layout on a simulated
// host file without --output, as one would on a GPU host: the real host's
// spec, /var/run/cdi/nvidia.yaml, is never written with the simulated
// host's devices. gpuctk runs in a mount namespace of its own with a
// tmpfs over /run, so this machine's spec dirs are never touched.
func TestMIGApplySimulatedKeepsHostSpec(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare is missing")
	}
	host := simulatedProfile(t, "dgx-a100")
	script := `mount -t tmpfs tmpfs /run || exit 99; "$0" "$@"; rc=$?; ls -A /run/cdi 2>/dev/null | sed 's/^/IN-RUN-CDI: /' >&2; exit $rc`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script,
		bin("gpuctk"), "mig", "apply", "-c", "all-balanced", "--simulate", host)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "IN-RUN-CDI: ") {
		t.Errorf("apply --simulate without --output wrote the host's spec dir /var/run/cdi:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "no spec written") {
		t.Errorf("apply --simulate without --output does not say that it wrote no spec:\n%s", stderr.String())
	}
	// The layout itself was applied to the profile file.
	if out, errs, code := gpuctkRun(t, nil, "mig", "assert", "-c", "all-balanced", "--simulate", host); code != 0 {
		t.Errorf("assert after apply: exit %d: %s%s", code, out, errs)
	}
}

// TestMIGApplyH200 partitions a simulated H200, a model the hard-coded
// table did not have, with the shipped binaries: apply makes seven
// 1g.18gb devices at the profile's placements, and the spec, the labels,
// the device plugin's resources and the MPS bound per MIG device all take
// the H200's profile (16 GiB, 16 SMs). A layout asking for two of the one
// +me instance the GPU holds is refused in one line, changing nothing.
func TestMIGApplyH200(t *testing.T) {
	host := simulatedProfile(t, "h200")
	layouts := filepath.Join(t.TempDir(), "layouts.yaml")
	if err := os.WriteFile(layouts, []byte("version: v1\nmig-configs:\n  all-1g.18gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.18gb\": 7\n  two-me:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.18gb+me\": 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(host)
	out, errs, code := gpuctkRun(t, nil, "mig", "apply", "-f", layouts, "-c", "two-me", "--simulate", host)
	if code == 0 || out != "" || strings.TrimSpace(errs) != `gpuctk: MIG config `+layouts+`, config "two-me" entry 1: GPU 0 (NVIDIA H200): 2 x 1g.18gb+me: the H200-141GB holds at most 1` {
		t.Errorf("two +me instances: exit %d: %s%s", code, out, errs)
	}
	if after, _ := os.ReadFile(host); string(after) != string(before) {
		t.Error("a refused layout changed the host file")
	}

	spec := filepath.Join(t.TempDir(), "nvidia.yaml")
	out, errs, code = gpuctkRun(t, nil, "mig", "apply", "-f", layouts, "-c", "all-1g.18gb", "--simulate", host, "--output", spec)
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, errs)
	}
	want := "GPU 0 (NVIDIA H200, GPU-3f0c2a91-7b5e-4d8a-9c16-2e8b5d4f7a03): MIG disabled -> MIG enabled: 7 x 1g.18gb\n  set MIG mode enabled\n"
	for gi := 7; gi <= 13; gi++ {
		want += fmt.Sprintf("  create GPU instance %d (1g.18gb, memory slice %d) with one compute instance\n", gi, gi-7)
	}
	if out != want {
		t.Errorf("plan:\n%s\nwant:\n%s", out, want)
	}
	if !strings.Contains(errs, "1 GPU, 7 MIG devices, 0 replicas") {
		t.Errorf("spec: %s", errs)
	}
	gen, _ := os.ReadFile(spec)
	names := " " + strings.Join(nvmlDeviceNames(t, mustJSON(t, host)), " ") + " "
	for _, n := range []string{"mig-0", "mig-6", "0:0", "0:6"} {
		if !strings.Contains(names, " "+n+" ") || !strings.Contains(string(gen), `name: "`+n+`"`) {
			t.Errorf("spec lacks %s: %s", n, names)
		}
	}

	single := writeConfig(t, "[kubernetes]\nmig-strategy = \"single\"\n")
	labels := run(t, bin("gpuctk"), "labels", "--simulate", host, "--config", single)
	for _, l := range []string{"nvidia.com/gpu.product=NVIDIA-H200-MIG-1g.18gb\n", "nvidia.com/gpu.count=7\n", "nvidia.com/gpu.memory=16384\n",
		"nvidia.com/gpu.multiprocessors=16\n", "nvidia.com/gpu.slices.gi=1\n", "nvidia.com/gpu.engines.jpeg=1\n", "nvidia.com/gpu.engines.ofa=0\n"} {
		if !strings.Contains(labels, l) {
			t.Errorf("labels lack %q:\n%s", l, labels)
		}
	}
	mixed := writeConfig(t, "[kubernetes]\nmig-strategy = \"mixed\"\n[mps]\nstate-root = \""+t.TempDir()+"\"\n")
	if labels := run(t, bin("gpuctk"), "labels", "--simulate", host, "--config", mixed); !strings.Contains(labels, "nvidia.com/mig-1g.18gb.count=7\n") {
		t.Errorf("mixed labels:\n%s", labels)
	}
	_, stream := runPlugin(t, "nvidia.com/mig-1g.18gb", nil, "--config", mixed, "--simulate", host, "--cdi-dir", t.TempDir())
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("ListAndWatch: %v", err)
	}
	if len(resp.Devices) != 7 {
		t.Errorf("nvidia.com/mig-1g.18gb: %d devices, want 7", len(resp.Devices))
	}

	// One MPS client per SM of the MIG device: 16 on a 1g.18gb.
	for replicas, ok := range map[int]bool{16: true, 17: false} {
		cfg := writeConfig(t, fmt.Sprintf("[[sharing]]\ndevices = [\"mig-0\"]\nstrategy = \"mps\"\nreplicas = %d\n", replicas))
		cmd := exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", host, "--config", cfg, "--output", "-")
		b, err := cmd.CombinedOutput()
		if (err == nil) != ok || !ok && !strings.Contains(string(b), "which has 16") {
			t.Errorf("mps x%d on a 1g.18gb: %v: %.300s", replicas, err, b)
		}
	}
}

// mustJSON is the spec `gpuctk cdi generate --simulate host` writes, in JSON.
func mustJSON(t *testing.T, host string) string {
	t.Helper()
	out, errs, code := gpuctkRun(t, nil, "cdi", "generate", "--simulate", host, "--format", "json")
	if code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	return out
}

// TestMIGDryRunNVML plans all-1g.18gb on an H200 through NVML with the
// shipped binary while every NVML call that would change the GPU fails:
// --dry-run prints the plan and changes nothing. With MIG off, the
// driver (as many do) reports no profile, and the plan says it comes
// from gpuctk's H200 data; with MIG on, a GPU gpuctk has no data for
// plans from the driver's own profiles.
func TestMIGDryRunNVML(t *testing.T) {
	p, err := inventory.LoadProfile("h200")
	if err != nil {
		t.Fatal(err)
	}
	var faults []fakenvml.Fault
	for _, f := range []string{"nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstance", "nvmlDeviceCreateGpuInstanceWithPlacement",
		"nvmlGpuInstanceCreateComputeInstance", "nvmlGpuInstanceDestroy", "nvmlComputeInstanceDestroy"} {
		faults = append(faults, fakenvml.Fault{Function: f, GPU: -1, Return: nvml.ERROR_NO_PERMISSION})
	}
	layouts := filepath.Join(t.TempDir(), "layouts.yaml")
	if err := os.WriteFile(layouts, []byte("version: v1\nmig-configs:\n  all-1g.18gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.18gb\": 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	creates := ""
	for gi := 7; gi <= 13; gi++ {
		creates += fmt.Sprintf("  create GPU instance %d (1g.18gb, memory slice %d) with one compute instance\n", gi, gi-7)
	}
	for _, tc := range []struct {
		name     string
		edit     func(string) string
		wantNote string
	}{
		{"MIG off", func(s string) string { return s },
			"  note: the driver reports MIG profiles only with MIG mode on: planned from gpuctk's H200-141GB model data; the instances are placed from the driver's profiles once MIG mode is on\n  set MIG mode enabled\n"},
		{"unknown GPU, MIG on", func(s string) string {
			s = strings.Replace(s, " off 143771 ", " on 143771 ", 1)
			s = strings.ReplaceAll(s, "NVIDIA H200", "NVIDIA H300 Future")
			return strings.Replace(s, "pci 0x233510DE", "pci 0x2FFF10DE", 1)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, hostFile := nvmlRoot(t, p, faults...)
			data, _ := os.ReadFile(hostFile)
			if tc.name != "MIG off" {
				// The library reports the H200's profiles for a GPU
				// of another name and id, as a newer one would.
				var model strings.Builder
				g := p.GPUs[0]
				g.MIGEnabled = true
				if err := fakenvml.Write(&model, &inventory.Host{DriverVersion: p.DriverVersion, CUDAVersion: p.CUDAVersion, GPUs: []inventory.GPU{g}}); err != nil {
					t.Fatal(err)
				}
				var profiles []string
				for _, l := range strings.Split(model.String(), "\n") {
					if strings.HasPrefix(l, "profile ") {
						profiles = append(profiles, l)
					}
				}
				s := tc.edit(string(data))
				s = strings.Replace(s, "pci 0x2FFF10DE\n", "pci 0x2FFF10DE\n"+strings.Join(profiles, "\n")+"\n", 1)
				data = []byte(s)
				if err := os.WriteFile(hostFile, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			env := []string{fakenvml.EnvVar + "=" + hostFile}
			out, errs, code := gpuctkRun(t, env, "mig", "apply", "--dry-run", "-f", layouts, "-c", "all-1g.18gb", "--driver-root", root)
			if code != 0 {
				t.Fatalf("dry run: exit %d: %s\n%s", code, errs, out)
			}
			name := "NVIDIA H200"
			have := "MIG disabled"
			if tc.name != "MIG off" {
				name, have = "NVIDIA H300 Future", "MIG enabled, no MIG devices"
			}
			want := "GPU 0 (" + name + ", GPU-3f0c2a91-7b5e-4d8a-9c16-2e8b5d4f7a03): " + have + " -> MIG enabled: 7 x 1g.18gb\n" + tc.wantNote + creates
			if out != want {
				t.Errorf("plan:\n%s\nwant:\n%s", out, want)
			}
			if after, _ := os.ReadFile(hostFile); string(after) != string(data) {
				t.Error("the dry run changed the GPU")
			}
		})
	}
}
