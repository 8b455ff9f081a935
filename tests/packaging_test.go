package tests

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The versions of the two builds: an install and an upgrade. An installed
// gpuctk at one of them is what an interrupted run of this test left.
const (
	pkgV1 = "0.0.1"
	pkgV2 = "0.0.2"
)

// packagedFiles are the files both packages install, with their modes;
// debOnly are the Debian-specific ones.
var (
	packagedFiles = map[string]string{
		"/usr/bin/gpuctk":                                      "-rwxr-xr-x",
		"/usr/bin/gpuctk-hook":                                 "-rwxr-xr-x",
		"/usr/bin/gpuctk-runtime":                              "-rwxr-xr-x",
		"/usr/bin/gpuctk-device-plugin":                        "-rwxr-xr-x",
		"/etc/gpuctk/config.toml":                              "-rw-r--r--",
		"/usr/lib/systemd/system/gpuctk-cdi-refresh.service":   "-rw-r--r--",
		"/usr/lib/systemd/system/gpuctk-cdi-refresh.path":      "-rw-r--r--",
		"/usr/lib/systemd/system/gpuctk-mps.service":           "-rw-r--r--",
		"/usr/lib/systemd/system/gpuctk-mig.service":           "-rw-r--r--",
		"/usr/lib/systemd/system/gpuctk-device-plugin.service": "-rw-r--r--",
		"/usr/share/man/man8/gpuctk.8.gz":                      "-rw-r--r--",
		"/usr/share/man/man8/gpuctk-device-plugin.8.gz":        "-rw-r--r--",
		"/usr/share/man/man8/gpuctk-hook.8.gz":                 "-rw-r--r--",
		"/usr/share/man/man8/gpuctk-runtime.8.gz":              "-rw-r--r--",
		"/usr/share/bash-completion/completions/gpuctk":        "-rw-r--r--",
		"/usr/lib/udev/rules.d/90-gpuctk-cdi-refresh.rules":    "-rw-r--r--",
	}
	debOnly = map[string]string{
		"/usr/share/doc/gpuctk/copyright":           "-rw-r--r--",
		"/usr/share/doc/gpuctk/changelog.Debian.gz": "-rw-r--r--",
		"/usr/share/lintian/overrides/gpuctk":       "-rw-r--r--",
	}
	refreshUnits = []string{"gpuctk-cdi-refresh.service", "gpuctk-cdi-refresh.path"}
)

// specPath is where the refresh unit writes the spec.
const specPath = "/var/run/cdi/nvidia.yaml"

// TestPackages builds the .deb and .rpm twice with `make packages` (two
// versions), checks what they contain, installs the .deb on this machine
// for real (install, upgrade over an edited config, purge) and the .rpm
// into a scratch root, and runs lintian on the .deb.
func TestPackages(t *testing.T) {
	for _, tool := range []string{"dpkg", "dpkg-deb", "rpm", "lintian", "systemd-analyze", "objdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: `make test` installs it (mk/packaging.mk)", tool)
		}
	}
	dir := t.TempDir()
	v1 := buildPackages(t, filepath.Join(dir, "v1"), pkgV1)
	v2 := buildPackages(t, filepath.Join(dir, "v2"), pkgV2)

	t.Run("deb contents", func(t *testing.T) { checkDebContents(t, v1) })
	t.Run("rpm contents", func(t *testing.T) { checkRPMContents(t, v1) })
	t.Run("lintian", func(t *testing.T) { checkLintian(t, v1.deb) })
	t.Run("udev rule", checkUdevRule)
	t.Run("deb install upgrade purge", func(t *testing.T) { checkDebLifecycle(t, v1, v2) })
	t.Run("rpm scratch root", func(t *testing.T) { checkRPMRoot(t, v1, v2) })
}

type packages struct {
	version  string
	deb, rpm string
}

// repoRoot is the module's root folder.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// buildPackages runs `make packages` into dist at version.
func buildPackages(t *testing.T, dist, version string) packages {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "packages", "PKG_VERSION="+version, "DIST="+dist)
	cmd.Dir = repoRoot()
	// This test may itself run under make: the inner make must not
	// inherit the outer one's jobserver.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make packages PKG_VERSION=%s: %v\n%s", version, err, out)
	}
	p := packages{version: version}
	for _, pat := range []struct {
		glob string
		dst  *string
	}{{"gpuctk_" + version + "-1_*.deb", &p.deb}, {"gpuctk-" + version + "-1.*.rpm", &p.rpm}} {
		m, _ := filepath.Glob(filepath.Join(dist, pat.glob))
		if len(m) != 1 {
			t.Fatalf("make packages wrote %v for %s, want one file", m, pat.glob)
		}
		*pat.dst = m[0]
	}
	return p
}

func checkDebContents(t *testing.T, p packages) {
	// Regular files and their modes, from the data archive.
	got := map[string]string{}
	for _, l := range lines(run(t, "dpkg-deb", "-c", p.deb)) {
		f := strings.Fields(l)
		if len(f) == 6 && strings.HasPrefix(f[0], "-") {
			got[strings.TrimPrefix(f[5], ".")] = f[0]
		}
	}
	want := map[string]string{}
	for _, m := range []map[string]string{packagedFiles, debOnly} {
		for k, v := range m {
			want[k] = v
		}
	}
	checkFileModes(t, "dpkg-deb -c", got, want)

	info := run(t, "dpkg-deb", "-f", p.deb, "Package", "Version", "Architecture", "Depends")
	for _, w := range []string{"Package: gpuctk\n", "Version: " + p.version + "-1\n", "Architecture: " + runtime.GOARCH + "\n"} {
		if !strings.Contains(info, w) {
			t.Errorf("control fields lack %q:\n%s", strings.TrimSpace(w), info)
		}
	}
	if !regexp.MustCompile(`(?m)^Depends: libc6 \(>= 2\.[0-9]+\)$`).MatchString(info) {
		t.Errorf("Depends is not libc6 (>= 2.N):\n%s", info)
	}
	if out := run(t, "dpkg-deb", "-I", p.deb); !strings.Contains(out, "conffiles") {
		t.Errorf("dpkg-deb -I lists no conffiles:\n%s", out)
	}

	// The control archive: conffiles, and the scripts as written.
	ctl := t.TempDir()
	run(t, "dpkg-deb", "-e", p.deb, ctl)
	if b, err := os.ReadFile(filepath.Join(ctl, "conffiles")); err != nil || string(b) != "/etc/gpuctk/config.toml\n" {
		t.Errorf("conffiles = %q, %v; want only /etc/gpuctk/config.toml", b, err)
	}
	for script, src := range map[string]string{"postinst": "postinstall.sh", "prerm": "preremove.sh", "postrm": "postremove.sh"} {
		sameFile(t, filepath.Join(ctl, script), filepath.Join(repoRoot(), "packaging/scripts", src))
	}
	if _, err := os.Stat(filepath.Join(ctl, "preinst")); err == nil {
		t.Errorf("the .deb has a preinst; none is written")
	}
}

func checkRPMContents(t *testing.T, p packages) {
	if got := run(t, "rpm", "-qp", "--qf", "%{NAME} %{VERSION}-%{RELEASE} %{ARCH}", p.rpm); !strings.HasPrefix(got, "gpuctk "+p.version+"-1 ") {
		t.Errorf("rpm name and version = %q, want gpuctk %s-1", got, p.version)
	}
	got := map[string]string{}
	for _, l := range lines(run(t, "rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]", p.rpm)) {
		f := strings.Fields(l)
		if len(f) == 2 && strings.HasPrefix(f[0], "-") {
			got[f[1]] = f[0]
		}
	}
	checkFileModes(t, "rpm -qp", got, packagedFiles)
	var list []string
	for f := range packagedFiles {
		list = append(list, f)
	}
	list = append(list, "/etc/gpuctk")
	slices.Sort(list)
	if got := lines(rpmOut(t, "-qpl", p.rpm)); !slices.Equal(got, list) {
		t.Errorf("rpm -qpl:\n got %q\nwant %q", got, list)
	}
	if got := lines(rpmOut(t, "-qpc", p.rpm)); !slices.Equal(got, []string{"/etc/gpuctk/config.toml"}) {
		t.Errorf("rpm -qpc = %q, want only /etc/gpuctk/config.toml", got)
	}
	// c: %config, n: noreplace.
	if got := rpmOut(t, "-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]", p.rpm); !strings.Contains(got, "/etc/gpuctk/config.toml cn\n") {
		t.Errorf("config.toml is not %%config(noreplace):\n%s", got)
	}
	if got := rpmOut(t, "-qpR", p.rpm); !regexp.MustCompile(`(?m)^glibc >= 2\.[0-9]+$`).MatchString(got) {
		t.Errorf("rpm requires no glibc >= 2.N:\n%s", got)
	}
	scripts := rpmOut(t, "-qp", "--scripts", p.rpm)
	for phase, src := range map[string]string{"postinstall": "postinstall.sh", "preuninstall": "preremove.sh", "postuninstall": "postremove.sh"} {
		body, err := os.ReadFile(filepath.Join(repoRoot(), "packaging/scripts", src))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(scripts, phase+" scriptlet (using /bin/sh):\n"+string(body)) {
			t.Errorf("rpm %s scriptlet is not packaging/scripts/%s:\n%s", phase, src, scripts)
		}
	}
}

// rpmOut runs rpm, dropping the lines Debian's rpm adds about using alien.
func rpmOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("rpm", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rpm %v: %v\n%s%s", args, err, out, stderr.String())
	}
	return string(out)
}

func checkFileModes(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for f, mode := range want {
		if got[f] != mode {
			t.Errorf("%s: %s has mode %q, want %q", what, f, got[f], mode)
		}
	}
	for f := range got {
		if _, ok := want[f]; !ok {
			t.Errorf("%s: unexpected file %s", what, f)
		}
	}
}

func sameFile(t *testing.T, got, want string) {
	t.Helper()
	a, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s differs from %s", got, want)
	}
}

// checkLintian runs lintian and fails on any error; warnings are logged.
func checkLintian(t *testing.T, deb string) {
	cmd := exec.Command("lintian", "--fail-on", "error", deb)
	// lintian leaves its mldbm-elf-* files in TMPDIR: a folder of the
	// test's, removed after it.
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	t.Logf("lintian %s:\n%s", filepath.Base(deb), out)
	if err != nil {
		t.Errorf("lintian reports errors: %v", err)
	}
	for _, l := range lines(string(out)) {
		if strings.HasPrefix(l, "E:") {
			t.Errorf("lintian: %s", l)
		}
	}
}

// checkUdevRule parses the udev rule: Debian 12's udevadm has no verify.
// Each rule is comma-separated KEY[{attr}]OP"value" pairs.
func checkUdevRule(t *testing.T) {
	path := filepath.Join(repoRoot(), "packaging/90-gpuctk-cdi-refresh.rules")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pair := regexp.MustCompile(`^(ACTION|SUBSYSTEM|KERNEL|DRIVER|TAG|ENV\{[A-Z_]+\})(==|!=|\+=|=)"[^"]*"$`)
	rules := 0
	for i, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		rules++
		for _, p := range strings.Split(l, ",") {
			if !pair.MatchString(strings.TrimSpace(p)) {
				t.Errorf("%s:%d: %q is not a KEY==\"value\" pair udev knows", path, i+1, strings.TrimSpace(p))
			}
		}
		for _, want := range []string{`ACTION=="add"`, `SUBSYSTEM=="module"`, `KERNEL=="nvidia"`, `TAG+="systemd"`, `ENV{SYSTEMD_WANTS}+="gpuctk-cdi-refresh.service"`} {
			if !strings.Contains(l, want) {
				t.Errorf("%s:%d: rule lacks %s", path, i+1, want)
			}
		}
	}
	if rules != 1 {
		t.Errorf("%s has %d rules, want 1", path, rules)
	}
}

// systemdRunning says whether systemd is this machine's init, as the
// maintainer scripts decide it.
func systemdRunning() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}

// dpkg runs dpkg, waiting while another dpkg or apt holds the lock.
func dpkg(t *testing.T, args ...string) (string, error) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		cmd := exec.Command("dpkg", args...)
		cmd.Stdin = nil // dpkg must never prompt: no terminal
		out, err := cmd.CombinedOutput()
		if err != nil && bytes.Contains(out, []byte("locked")) && time.Now().Before(deadline) {
			time.Sleep(3 * time.Second)
			continue
		}
		return string(out), err
	}
}

// installedVersion returns the installed gpuctk's version, "" if none.
func installedVersion() string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Version}", "gpuctk").Output()
	if err != nil {
		return ""
	}
	status, version, _ := strings.Cut(string(out), " ")
	if strings.TrimSpace(status) == "un" {
		return ""
	}
	return strings.TrimSpace(version)
}

// checkDebLifecycle installs, upgrades and purges the .deb on this machine.
// The cleanup purges it whatever happens, so no gpuctk package is ever
// left installed.
func checkDebLifecycle(t *testing.T, v1, v2 packages) {
	switch v := installedVersion(); v {
	case "":
	case pkgV1 + "-1", pkgV2 + "-1":
		t.Logf("purging gpuctk %s, left by an interrupted run", v)
		if out, err := dpkg(t, "--purge", "gpuctk"); err != nil {
			t.Fatalf("dpkg --purge gpuctk: %v\n%s", err, out)
		}
	default:
		t.Fatalf("gpuctk %s is installed on this machine: this test installs and purges its own builds; remove it first (dpkg --purge gpuctk)", v)
	}
	// A spec another tool wrote at the same path is put back afterwards.
	if old, err := os.ReadFile(specPath); err == nil {
		t.Cleanup(func() { os.WriteFile(specPath, old, 0o644) })
	} else {
		t.Cleanup(func() { os.Remove(specPath) })
	}
	t.Cleanup(func() {
		if installedVersion() != "" {
			if out, err := dpkg(t, "--purge", "gpuctk"); err != nil {
				t.Errorf("cleanup: dpkg --purge gpuctk: %v\n%s", err, out)
			}
		}
	})

	// Install.
	if out, err := dpkg(t, "-i", v1.deb); err != nil {
		t.Fatalf("dpkg -i %s: %v\n%s", filepath.Base(v1.deb), err, out)
	}
	if v := installedVersion(); v != v1.version+"-1" {
		t.Fatalf("installed version is %q, want %s-1", v, v1.version)
	}
	checkVersion(t, v1.version)
	out := run(t, "/usr/bin/gpuctk", "cdi", "generate", "--simulate", "dgx-a100")
	if !strings.Contains(out, `kind: "nvidia.com/gpu"`) || !strings.Contains(out, "gpuctk: nvidia.com/gpu spec: 8 GPUs, 16 MIG devices, 0 replicas, 65 device names") {
		t.Errorf("installed gpuctk cdi generate --simulate dgx-a100:\n%.600s", out)
	}
	for _, u := range refreshUnits {
		checkEnabled(t, u, "enabled")
	}
	checkEnabled(t, "gpuctk-mps.service", "disabled")
	checkEnabled(t, "gpuctk-mig.service", "disabled")
	checkEnabled(t, "gpuctk-device-plugin.service", "disabled")
	// systemd-analyze checks the units against this machine's systemd,
	// including that their commands exist.
	units := []string{"/usr/lib/systemd/system/gpuctk-cdi-refresh.service", "/usr/lib/systemd/system/gpuctk-cdi-refresh.path", "/usr/lib/systemd/system/gpuctk-mps.service", "/usr/lib/systemd/system/gpuctk-mig.service", "/usr/lib/systemd/system/gpuctk-device-plugin.service"}
	if out, err := exec.Command("systemd-analyze", append([]string{"verify", "--man=no"}, units...)...).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if systemdRunning() {
		checkRefreshUnit(t)
	}

	// The admin shares GPU 0 and turns the watcher off.
	edited, err := os.ReadFile("/etc/gpuctk/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	edited = append(edited, "\n[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n"...)
	if err := os.WriteFile("/etc/gpuctk/config.toml", edited, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "systemctl", "disable", "gpuctk-cdi-refresh.path")
	const shared = "gpuctk: nvidia.com/gpu spec: 8 GPUs, 16 MIG devices, 4 replicas"
	if out := run(t, "/usr/bin/gpuctk", "cdi", "generate", "--simulate", "dgx-a100"); !strings.Contains(out, shared) {
		t.Errorf("the edited config does not share GPU 0:\n%s", lastLine(out))
	}

	// Upgrade: the edit, the admin's disable and the spec survive.
	run(t, "/usr/bin/gpuctk", "cdi", "generate", "--simulate", "dgx-a100", "--output", specPath)
	if out, err := dpkg(t, "-i", v2.deb); err != nil {
		t.Fatalf("dpkg -i %s (upgrade): %v\n%s", filepath.Base(v2.deb), err, out)
	}
	if v := installedVersion(); v != v2.version+"-1" {
		t.Fatalf("installed version after upgrade is %q, want %s-1", v, v2.version)
	}
	checkVersion(t, v2.version)
	if got, err := os.ReadFile("/etc/gpuctk/config.toml"); err != nil || !bytes.Equal(got, edited) {
		t.Errorf("the edited /etc/gpuctk/config.toml did not survive the upgrade (%v):\n%s", err, got)
	}
	if out := run(t, "/usr/bin/gpuctk", "cdi", "generate", "--simulate", "dgx-a100"); !strings.Contains(out, shared) {
		t.Errorf("after the upgrade gpuctk does not share GPU 0:\n%s", lastLine(out))
	}
	checkEnabled(t, "gpuctk-cdi-refresh.path", "disabled")
	checkEnabled(t, "gpuctk-cdi-refresh.service", "enabled")
	if _, err := os.Stat(specPath); err != nil {
		t.Errorf("the upgrade removed the spec: %v", err)
	}

	// Remove, then install again (apt remove, apt install): dpkg keeps
	// the conffile, so the reinstall's postinst is told the old version,
	// as on an upgrade. The units enabled before the removal are enabled
	// again, the admin's disable is kept, and the removal took the spec.
	run(t, "systemctl", "enable", "gpuctk-device-plugin.service")
	if out, err := dpkg(t, "--remove", "gpuctk"); err != nil {
		t.Fatalf("dpkg --remove gpuctk: %v\n%s", err, out)
	}
	if _, err := os.Lstat(specPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is left after dpkg --remove (%v)", specPath, err)
	}
	if out, err := dpkg(t, "-i", v2.deb); err != nil {
		t.Fatalf("dpkg -i %s (after dpkg --remove): %v\n%s", filepath.Base(v2.deb), err, out)
	}
	checkEnabled(t, "gpuctk-cdi-refresh.service", "enabled")
	checkEnabled(t, "gpuctk-cdi-refresh.path", "disabled")
	checkEnabled(t, "gpuctk-device-plugin.service", "enabled")
	checkEnabled(t, "gpuctk-mps.service", "disabled")

	// Purge: nothing is left.
	if out, err := dpkg(t, "--purge", "gpuctk"); err != nil {
		t.Fatalf("dpkg --purge gpuctk: %v\n%s", err, out)
	}
	if v := installedVersion(); v != "" {
		t.Errorf("gpuctk %s is still installed after purge", v)
	}
	gone := []string{"/etc/gpuctk", "/usr/share/doc/gpuctk", "/var/lib/gpuctk", specPath}
	for _, m := range []map[string]string{packagedFiles, debOnly} {
		for f := range m {
			gone = append(gone, f)
		}
	}
	for _, f := range gone {
		if _, err := os.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left after purge (%v)", f, err)
		}
	}
	filepath.WalkDir("/etc/systemd/system", func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), "gpuctk") {
			t.Errorf("%s is left after purge", p)
		}
		return nil
	})
}

func lastLine(s string) string {
	l := lines(s)
	if len(l) == 0 {
		return ""
	}
	return l[len(l)-1]
}

// checkVersion checks what the installed gpuctk says its version is.
func checkVersion(t *testing.T, version string) {
	t.Helper()
	if out := run(t, "/usr/bin/gpuctk", "--version"); strings.TrimSpace(out) != "gpuctk version "+version {
		t.Errorf("gpuctk --version = %q, want \"gpuctk version %s\"", strings.TrimSpace(out), version)
	}
}

// checkEnabled checks a unit's enablement; systemctl reads the links, so
// this works without systemd running too.
func checkEnabled(t *testing.T, unit, want string) {
	t.Helper()
	out, _ := exec.Command("systemctl", "is-enabled", unit).CombinedOutput()
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("systemctl is-enabled %s = %q, want %q", unit, got, want)
	}
}

// checkRefreshUnit runs the refresh unit under a running systemd: on a
// machine without an NVIDIA driver it succeeds and logs why it wrote
// nothing.
func checkRefreshUnit(t *testing.T) {
	t.Helper()
	if out, _ := exec.Command("systemctl", "is-active", "gpuctk-cdi-refresh.path").CombinedOutput(); strings.TrimSpace(string(out)) != "active" {
		t.Errorf("gpuctk-cdi-refresh.path is %q after install, want active", strings.TrimSpace(string(out)))
	}
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		return // a GPU host: the unit writes a real spec
	}
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	if out, err := exec.Command("systemctl", "start", "gpuctk-cdi-refresh.service").CombinedOutput(); err != nil {
		t.Fatalf("systemctl start gpuctk-cdi-refresh.service: %v\n%s", err, out)
	}
	var log []byte
	for range 20 {
		log, _ = exec.Command("journalctl", "--no-pager", "-o", "cat", "-u", "gpuctk-cdi-refresh.service", "--since", since).CombinedOutput()
		if bytes.Contains(log, []byte("gpuctk: no NVIDIA driver loaded")) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("gpuctk-cdi-refresh.service logged no \"no NVIDIA driver loaded\" line:\n%s", log)
}

// checkRPMRoot installs the .rpm into a scratch root with a shell, so its
// scriptlets really run there (a chroot without systemd), upgrades it over
// an edited config and erases it.
func checkRPMRoot(t *testing.T, v1, v2 packages) {
	root := t.TempDir()
	for _, d := range []string{"bin", "dev", "var/run/cdi"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"), 0o755)
	for _, l := range []string{"sh", "grep", "rm", "rmdir"} {
		os.Symlink("busybox", filepath.Join(root, "bin", l))
	}
	run(t, "mknod", "-m", "666", filepath.Join(root, "dev/null"), "c", "1", "3")

	rpm := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("rpm", append([]string{"--root", root}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || strings.Contains(stderr.String(), "scriptlet failed") || strings.Contains(stderr.String(), "error:") {
			t.Fatalf("rpm --root %s %v: %v\n%s%s", root, args, err, out, stderr.String())
		}
		return string(out)
	}
	rpm("--initdb")
	rpm("-ivh", "--nodeps", v1.rpm)
	for f, mode := range packagedFiles {
		st, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Errorf("rpm -i: %v", err)
			continue
		}
		if st.Mode().String() != mode {
			t.Errorf("rpm -i: %s has mode %s, want %s", f, st.Mode(), mode)
		}
	}
	sameFile(t, filepath.Join(root, "etc/gpuctk/config.toml"), filepath.Join(repoRoot(), "packaging/config.toml"))
	if got := strings.TrimSpace(rpm("-q", "gpuctk")); got != "gpuctk-"+v1.version+"-1."+rpmArch() {
		t.Errorf("rpm -q gpuctk = %q", got)
	}

	conf := filepath.Join(root, "etc/gpuctk/config.toml")
	edited := append(readFile(t, conf), "\n[mps]\nshm-size = \"2GiB\"\n"...)
	if err := os.WriteFile(conf, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	rpm("-Uvh", "--nodeps", v2.rpm)
	if got := readFile(t, conf); !bytes.Equal(got, edited) {
		t.Errorf("rpm -U replaced the edited config.toml:\n%s", got)
	}
	if got := strings.TrimSpace(rpm("-q", "gpuctk")); got != "gpuctk-"+v2.version+"-1."+rpmArch() {
		t.Errorf("rpm -q gpuctk after upgrade = %q", got)
	}

	// Erase keeps a spec gpuctk did not write, even one that calls
	// gpuctk-hook.
	foreign := []byte("cdiVersion: \"0.5.0\"\nkind: nvidia.com/gpu\ncontainerEdits:\n  hooks:\n  - hookName: createContainer\n    path: /usr/bin/gpuctk-hook\ndevices: []\n")
	spec := filepath.Join(root, specPath)
	if err := os.WriteFile(spec, foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	rpm("-e", "gpuctk")
	for f := range packagedFiles {
		if _, err := os.Stat(filepath.Join(root, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left after rpm -e (%v)", f, err)
		}
	}
	// rpm keeps an edited config as .rpmsave.
	if _, err := os.Stat(conf + ".rpmsave"); err != nil {
		t.Errorf("rpm -e did not keep the edited config as .rpmsave: %v", err)
	}
	if got, err := os.ReadFile(spec); err != nil || !bytes.Equal(got, foreign) {
		t.Errorf("rpm -e removed or changed a spec gpuctk did not write (%v)", err)
	}
}

func rpmArch() string {
	if runtime.GOARCH == "amd64" {
		return "x86_64"
	}
	if runtime.GOARCH == "arm64" {
		return "aarch64"
	}
	return runtime.GOARCH
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPackagedUnitsOrder checks that the units whose work containers
// need at boot (the spec, the MIG layout, the MPS daemons) are ordered
// before everything that starts containers at boot: the engines, podman's
// restart of --restart=always containers, the kubelet, and the
// distributions that run containerd inside their own unit (k3s, RKE2).
// /run is a tmpfs, so at boot /var/run/cdi has no spec until the refresh.
func TestPackagedUnitsOrder(t *testing.T) {
	starters := []string{"containerd.service", "docker.service", "crio.service", "podman-restart.service",
		"kubelet.service", "k3s.service", "k3s-agent.service", "rke2-server.service", "rke2-agent.service"}
	for _, unit := range []string{"gpuctk-cdi-refresh.service", "gpuctk-mig.service", "gpuctk-mps.service"} {
		data := readFile(t, filepath.Join(repoRoot(), "packaging", unit))
		before := map[string]bool{}
		for _, l := range lines(string(data)) {
			if v, ok := strings.CutPrefix(l, "Before="); ok {
				for _, u := range strings.Fields(v) {
					before[u] = true
				}
			}
		}
		for _, s := range starters {
			if !before[s] {
				t.Errorf("%s is not ordered before %s: containers it starts at boot may run before the unit's work is done", unit, s)
			}
		}
	}
}
