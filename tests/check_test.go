package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
)

// TestCdiCheck runs `gpuctk cdi check` on a spec dir holding the spec
// generated for a simulated host (a profile file), after the host changed
// as a user's host does: fresh is exit 0 and one line; stale is exit 1,
// one line per stale thing on stdout and the fix on stderr; bad use is 2.
func TestCdiCheck(t *testing.T) {
	profile, err := os.ReadFile(filepath.Join(repoRoot(), "inventory/profiles/l40s.toml"))
	if err != nil {
		t.Fatal(err)
	}
	lastGPU := strings.LastIndex(string(profile), "[[gpu]]")
	uuid := regexp.MustCompile(`GPU-[0-9a-f-]+`).FindString(string(profile[lastGPU:]))
	const summary = "4 GPUs, 0 MIG devices, 0 replicas, 9 device names"
	tests := []struct {
		name string
		// host is the profile now; spec dir files are made by files.
		host       string
		files      func(t *testing.T, dir string)
		args       []string
		code       int
		stdout     []string
		stderrLast string // the last line of stderr, "DIR" for the spec dir
	}{
		{name: "fresh", host: string(profile), code: 0,
			stderrLast: "gpuctk: fresh: DIR/nvidia.yaml matches this host (" + summary + ")"},
		{name: "driver upgraded", host: strings.Replace(string(profile), `driver-version = "580.65.06"`, `driver-version = "590.48.01"`, 1), code: 1,
			stdout:     []string{"DIR/nvidia.yaml: common edits: driver 580.65.06 in the spec, 590.48.01 on the host (29 of the driver's files and links differ)"},
			stderrLast: "gpuctk: 1 of 1 spec stale: regenerate as said above"},
		{name: "GPU removed", host: string(profile[:lastGPU]), code: 1,
			stdout: []string{
				// The one hook call lists every GPU's DRM by-path links.
				"DIR/nvidia.yaml: common edits: createContainer hook /usr/bin/gpuctk-hook: arguments differ: only the spec's call has ../card4::/dev/dri/by-path/pci-0000:c1:00.0-card ../renderD131::/dev/dri/by-path/pci-0000:c1:00.0-render",
				"DIR/nvidia.yaml: device 3, " + uuid + ": in the spec, not on the host (a GPU or MIG device removed, its UUID changed, or sharing changed)"}},
		{name: "no spec", host: string(profile), files: func(*testing.T, string) {}, code: 1,
			stderrLast: "gpuctk: no nvidia.com/gpu spec written by gpuctk in DIR: run `gpuctk cdi generate --output /var/run/cdi/nvidia.yaml`"},
		{name: "another tool's spec", host: string(profile), files: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "other.yaml"), "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [{name: x, containerEdits: {env: [A=1]}}]\n")
		}, code: 1, stderrLast: "gpuctk: no nvidia.com/gpu spec written by gpuctk in DIR: run `gpuctk cdi generate --output /var/run/cdi/nvidia.yaml`"},
		{name: "huge spec", host: string(profile), files: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "nvidia.yaml"), "# Written by gpuctk.\n")
			if err := os.Truncate(filepath.Join(dir, "nvidia.yaml"), 1<<30); err != nil {
				t.Fatal(err)
			}
		}, code: 1, stderrLast: "gpuctk: 1 spec could not be read (above)"},
		{name: "FIFO spec", host: string(profile), files: func(t *testing.T, dir string) {
			if err := unix.Mkfifo(filepath.Join(dir, "nvidia.yaml"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, code: 1, stderrLast: "gpuctk: no nvidia.com/gpu spec written by gpuctk in DIR: run `gpuctk cdi generate --output /var/run/cdi/nvidia.yaml`"},
		{name: "unknown flag", host: string(profile), args: []string{"--spec-dri", "x"}, code: 2,
			stderrLast: "Run 'gpuctk cdi check --help' for usage."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			before, now := filepath.Join(tmp, "before.toml"), filepath.Join(tmp, "now.toml")
			write(t, before, string(profile))
			write(t, now, tc.host)
			dir := filepath.Join(tmp, "cdi")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.files == nil {
				if _, stderr, code := gpuctkRun(t, nil, "cdi", "generate", "--simulate", before, "--output", filepath.Join(dir, "nvidia.yaml")); code != 0 {
					t.Fatalf("generate: %s", stderr)
				}
			} else {
				tc.files(t, dir)
			}
			args := append([]string{"cdi", "check", "--simulate", now, "--spec-dir", dir}, tc.args...)
			stdout, stderr, code := gpuctkRun(t, nil, args...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			got := lines(strings.ReplaceAll(stdout, dir, "DIR"))
			if strings.Join(got, "\n") != strings.Join(tc.stdout, "\n") {
				t.Errorf("stdout:\n got %q\nwant %q", got, tc.stdout)
			}
			errLines := lines(strings.ReplaceAll(stderr, dir, "DIR"))
			if tc.stderrLast != "" && (len(errLines) == 0 || errLines[len(errLines)-1] != tc.stderrLast) {
				t.Errorf("stderr:\n%s\nwant its last line %q", stderr, tc.stderrLast)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRefreshIfStale runs the packaged refresh unit's command on a fake
// driver root read through the NVML double: the first run writes the spec;
// a run with nothing changed writes nothing (same file, same inode), so an
// unchanged boot or a config touch leaves runtimes' caches valid; after
// a device node changes, `cdi check` says what is stale, the refresh
// rewrites the spec, and `cdi check` finds it fresh.
func TestRefreshIfStale(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(repoRoot(), "packaging/gpuctk-cdi-refresh.service"))
	if err != nil {
		t.Fatal(err)
	}
	execStart := regexp.MustCompile(`(?m)^ExecStart=/usr/bin/gpuctk (.*)$`).FindSubmatch(unit)
	if execStart == nil {
		t.Fatal("gpuctk-cdi-refresh.service has no ExecStart=/usr/bin/gpuctk line")
	}
	unitArgs := strings.Fields(string(execStart[1]))
	if !strings.Contains(string(execStart[1]), "--if-stale") {
		t.Fatalf("the refresh unit runs %q, without --if-stale: it rewrites an unchanged spec", execStart[1])
	}
	fakehost.RequireRoot(t, "mknod for the fake driver root's device nodes")
	p, err := inventory.LoadProfile("l40s")
	if err != nil {
		t.Fatal(err)
	}
	root, hostFile := nvmlRoot(t, p)
	if err := os.MkdirAll(filepath.Join(root, "proc/driver/nvidia"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "proc/driver/nvidia/version"), "NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+p.DriverVersion+"\n")
	dir := filepath.Join(t.TempDir(), "cdi")
	spec := filepath.Join(dir, "nvidia.yaml")
	env := []string{fakenvml.EnvVar + "=" + hostFile}
	// The unit's arguments, with the output and the host moved to the
	// test's (gpuctkRun adds a config of its own).
	var refresh []string
	for i := 0; i < len(unitArgs); i++ {
		if unitArgs[i] == "--output" {
			refresh = append(refresh, "--output", spec)
			i++
			continue
		}
		refresh = append(refresh, unitArgs[i])
	}
	refresh = append(refresh, "--driver-root", root)
	check := []string{"cdi", "check", "--driver-root", root, "--spec-dir", dir}
	inode := func() uint64 {
		var st unix.Stat_t
		if err := unix.Stat(spec, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}

	if _, stderr, code := gpuctkRun(t, env, refresh...); code != 0 || !strings.Contains(stderr, "gpuctk: wrote nvidia.com/gpu spec to "+spec) {
		t.Fatalf("first refresh: exit %d, want the spec written:\n%s", code, stderr)
	}
	first := inode()
	if stdout, stderr, code := gpuctkRun(t, env, check...); code != 0 || stdout != "" {
		t.Fatalf("check after the refresh: exit %d, want 0 and nothing on stdout:\n%s%s", code, stdout, stderr)
	}
	_, stderr, code := gpuctkRun(t, env, refresh...)
	if want := "gpuctk: " + spec + " is fresh (4 GPUs, 0 MIG devices, 0 replicas, 9 device names): nothing written"; code != 0 || strings.TrimSpace(stderr) != want {
		t.Errorf("refresh with nothing changed: exit %d, stderr %q, want %q", code, stderr, want)
	}
	if inode() != first {
		t.Errorf("refresh with nothing changed replaced %s", spec)
	}

	// The driver renumbers /dev/nvidia2.
	node := filepath.Join(root, "dev/nvidia2")
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(195, 12))); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := gpuctkRun(t, env, check...)
	want := spec + ": device 2, " + p.GPUs[2].UUID + ": device node /dev/nvidia2: c 195:2 from " + node + " in the spec, c 195:12 from " + node + " on the host"
	if code != 1 || strings.TrimSpace(stdout) != want {
		t.Errorf("check after /dev/nvidia2 changed: exit %d, stdout %q, want 1 and %q\n%s", code, stdout, want, stderr)
	}
	if _, stderr, code := gpuctkRun(t, env, refresh...); code != 0 || !strings.Contains(stderr, "gpuctk: stale: "+want) || !strings.Contains(stderr, "gpuctk: wrote ") {
		t.Errorf("refresh after /dev/nvidia2 changed: exit %d, want the stale line and the spec written:\n%s", code, stderr)
	}
	if stdout, stderr, code := gpuctkRun(t, env, check...); code != 0 {
		t.Errorf("check after the second refresh: exit %d, want 0\n%s%s", code, stdout, stderr)
	}

	// The driver folder: the spec mounts it, from under the driver root.
	store := filepath.Join(root, "var/lib/gpuctk/driver")
	folders := func() []string {
		entries, _ := os.ReadDir(store)
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	first2 := folders()
	data, _ := os.ReadFile(spec)
	if len(first2) != 1 || !strings.Contains(string(data), `hostPath: "`+filepath.Join(store, first2[0], "core")+`"`) || !strings.Contains(string(data), `containerPath: "/usr/lib/gpuctk/core"`) {
		t.Fatalf("driver folders %q; the spec does not mount the folder:\n%s", first2, data)
	}
	info := func() string {
		stdout, stderr, code := gpuctkRun(t, env, "info", "--driver-root="+root, "--spec-dir", dir) // gpuctkRun puts --config third
		if code != 0 {
			t.Fatalf("info: exit %d\n%s", code, stderr)
		}
		for _, l := range lines(stdout) {
			if strings.HasPrefix(l, "Driver files:") {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		return ""
	}
	if got, want := info(), "Driver files: in the driver folder "+filepath.Join(store, first2[0])+", mounted once per capability"; got != want {
		t.Errorf("info says %q, want %q", got, want)
	}
	// Removed (someone cleaned /var/lib): check says the spec is stale
	// and makes nothing; the refresh makes it again. Meanwhile the
	// firmware's folder, which holds nothing else, is mounted whole.
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = gpuctkRun(t, env, check...)
	want = spec + ": common edits: driver folder " + filepath.Join(store, first2[0]) + " in the spec, which no longer holds the driver's files (removed, or a file reinstalled): the host's files are mounted one by one now (10 of the driver's files and links differ)"
	if code != 1 || strings.TrimSpace(stdout) != want || len(folders()) != 0 {
		t.Errorf("check with the driver folder gone: exit %d, folders %q, stdout %q; want 1, none made, and %q\n%s", code, folders(), stdout, want, stderr)
	}
	if got, want := info(), "Driver files: a mount each but those in the driver's own folders "+filepath.Join(root, "lib/firmware/nvidia", p.DriverVersion)+", mounted whole: no driver folder for the others yet (`gpuctk cdi generate` makes it where it can)"; got != want || len(folders()) != 0 {
		t.Errorf("info with the driver folder gone says %q, want %q, and makes none (%q)", got, want, folders())
	}
	if _, stderr, code := gpuctkRun(t, env, refresh...); code != 0 || !slices.Equal(folders(), first2) {
		t.Errorf("refresh with the driver folder gone: exit %d, folders %q, want %q\n%s", code, folders(), first2, stderr)
	}
	// A library reinstalled (a new inode): a new folder, and the old
	// one, of the same driver version, is kept for running containers.
	lib := filepath.Join(root, fakehost.LibDir, "libcuda.so."+p.DriverVersion)
	data, _ = os.ReadFile(lib)
	if err := os.Remove(lib); err != nil {
		t.Fatal(err)
	}
	write(t, lib, string(data))
	if stdout, _, code := gpuctkRun(t, env, check...); code != 1 || !strings.HasPrefix(stdout, spec+": common edits: driver folder "+filepath.Join(store, first2[0])+" in the spec, which no longer holds") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("check after libcuda was reinstalled: exit %d, want 1 and one line on the driver folder:\n%s", code, stdout)
	}
	if _, stderr, code := gpuctkRun(t, env, refresh...); code != 0 || len(folders()) != 2 || !slices.Contains(folders(), first2[0]) {
		t.Errorf("refresh after libcuda was reinstalled: exit %d, folders %q, want the old and a new one\n%s", code, folders(), stderr)
	}
	if stdout, stderr, code := gpuctkRun(t, env, check...); code != 0 {
		t.Errorf("check after the last refresh: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
}

// TestInfoFresh checks the line `gpuctk info` gives about the specs: fresh,
// or stale with what is stale and the fix.
func TestInfoFresh(t *testing.T) {
	profile, err := os.ReadFile(filepath.Join(repoRoot(), "inventory/profiles/l40s.toml"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	before, removed := filepath.Join(tmp, "before.toml"), filepath.Join(tmp, "removed.toml")
	write(t, before, string(profile))
	write(t, removed, string(profile[:strings.LastIndex(string(profile), "[[gpu]]")]))
	dir := filepath.Join(tmp, "cdi")
	spec := filepath.Join(dir, "nvidia.yaml")
	if _, stderr, code := gpuctkRun(t, nil, "cdi", "generate", "--simulate", before, "--output", spec); code != 0 {
		t.Fatalf("generate: %s", stderr)
	}
	for _, tc := range []struct {
		host string
		want []string
	}{
		{before, []string{"Fresh:   yes: " + spec + " matches this host"}},
		{removed, []string{
			"Fresh:   no: " + spec + " is stale (2 differences): run `gpuctk cdi generate --output " + spec + "`",
			"stale: " + spec + ": common edits: createContainer hook /usr/bin/gpuctk-hook: arguments differ: only the spec's call has ../card4::/dev/dri/by-path/pci-0000:c1:00.0-card ../renderD131::/dev/dri/by-path/pci-0000:c1:00.0-render",
			"stale: " + spec + ": device 3, GPU-2c434ed1-33a0-0de5-2d4e-175c5a67aae2: in the spec, not on the host (a GPU or MIG device removed, its UUID changed, or sharing changed)",
		}},
	} {
		stdout, stderr, code := gpuctkRun(t, nil, "info", "--spec-dir="+dir, "--simulate", tc.host) // gpuctkRun puts --config third
		if code != 0 {
			t.Fatalf("info: exit %d\n%s", code, stderr)
		}
		out := lines(stdout)
		i := slices.IndexFunc(out, func(l string) bool { return strings.HasPrefix(l, "Fresh:") })
		if i < 0 || strings.Join(out[i:], "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("info with %s:\n%s\nwant its last lines %q", filepath.Base(tc.host), stdout, tc.want)
		}
	}
}
