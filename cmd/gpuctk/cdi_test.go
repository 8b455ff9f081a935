package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/urfave/cli/v2"
)

// gpuctk runs the gpuctk command line in this process and returns its
// standard output, standard error and exit status, as main reports them.
func gpuctk(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := &cli.App{Name: "gpuctk", Commands: []*cli.Command{cdiCommand()}, HideHelpCommand: true,
		Flags: logFlags(), Before: quietBefore, Writer: &stdout, ErrWriter: &stderr}
	strict(app)
	status := 0
	if err := app.Run(append([]string{"gpuctk"}, args...)); err != nil {
		status = report(&stderr, err)
	}
	return stdout.String(), stderr.String(), status
}

// TestGenerateIfStaleNeedsOutput checks that --if-stale without --output
// is a usage mistake said before the host is read: before, the host was
// read and the spec built first (the driver folder made on a real host),
// so a host that could not be read hid the mistake behind its own error.
func TestGenerateIfStaleNeedsOutput(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, status := gpuctk(t, "cdi", "generate", "--config", cfg, "--if-stale", "--simulate", filepath.Join(dir, "no-such-profile.toml"))
	if status != 2 || stdout != "" || !strings.Contains(stderr, "--if-stale needs --output") {
		t.Errorf("cdi generate --if-stale without --output: exit %d, stdout %q, stderr %q; want 2 and the usage mistake", status, stdout, stderr)
	}
	// "-" is standard output too.
	_, stderr, status = gpuctk(t, "cdi", "generate", "--config", cfg, "--if-stale", "--output", "-", "--simulate", filepath.Join(dir, "no-such-profile.toml"))
	if status != 2 || !strings.Contains(stderr, "--if-stale needs --output") {
		t.Errorf("cdi generate --if-stale without --output: exit %d, stderr %q; want 2 and the usage mistake", status, stderr)
	}
}

// TestListConflictsHideEveryDevice checks what `cdi list` says when specs
// that define the same names leave no device resolved: the conflicts,
// exit 1, and not the note that the folders hold no device, whose advice
// (generate a spec) would add one more spec defining the same names.
func TestListConflictsHideEveryDevice(t *testing.T) {
	dir := t.TempDir()
	spec := "cdiVersion: \"0.5.0\"\nkind: \"nvidia.com/gpu\"\ndevices:\n  - name: \"0\"\n    containerEdits:\n      deviceNodes:\n        - path: \"/dev/nvidia0\"\n"
	for _, name := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, status := gpuctk(t, "cdi", "list", "--config", cfg, "--spec-dir", dir)
	if status != 1 || !strings.Contains(stderr, "conflict: ") || strings.Contains(stderr, "no CDI devices") {
		t.Errorf("cdi list of two specs defining one name: exit %d, stderr %q; want 1, the conflict, no note that there are no devices", status, stderr)
	}
}

// TestGenerateBesideSameNames checks that a spec written beside another
// spec file defining the same names (the spec written as JSON next to the
// YAML of a previous run) is an error naming the other file: CDI readers
// then resolve none of those names from the folder, so containers get no
// device. Before, generate said it wrote the spec and exited 0.
func TestGenerateBesideSameNames(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[runtime]\ncache-dir = \""+filepath.Join(dir, "no-cache")+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs := filepath.Join(dir, "cdi")
	yaml, json := filepath.Join(specs, "nvidia.yaml"), filepath.Join(specs, "nvidia.json")
	if _, stderr, status := gpuctk(t, "cdi", "generate", "--config", cfg, "--simulate", "l40s", "--output", yaml); status != 0 {
		t.Fatalf("first generate: exit %d: %s", status, stderr)
	}
	for _, args := range [][]string{{"--output", json}, {"--output", json, "--if-stale"}} {
		_, stderr, status := gpuctk(t, append([]string{"cdi", "generate", "--config", cfg, "--simulate", "l40s"}, args...)...)
		if status != 1 || !strings.Contains(stderr, yaml+" defines the same") {
			t.Errorf("generate %q beside %s: exit %d, stderr %q; want 1 and an error naming %s", args, yaml, status, stderr, yaml)
		}
	}
	if err := os.Remove(yaml); err != nil {
		t.Fatal(err)
	}
	if _, stderr, status := gpuctk(t, "cdi", "generate", "--config", cfg, "--simulate", "l40s", "--output", json, "--if-stale"); status != 0 {
		t.Errorf("generate alone in its folder: exit %d: %s", status, stderr)
	}
}

// TestGenerateBesideManySameNames: many files defining the names of the
// spec generate writes are one error line naming a few and counting the
// rest, and a file of the folder that is not a spec is a warning.
func TestGenerateBesideManySameNames(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[runtime]\ncache-dir = \""+filepath.Join(dir, "no-cache")+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	specs := filepath.Join(dir, "cdi")
	out := filepath.Join(specs, "nvidia.yaml")
	if _, stderr, status := gpuctk(t, "cdi", "generate", "--config", cfg, "--simulate", "l40s", "--output", out); status != 0 {
		t.Fatalf("first generate: exit %d: %s", status, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		os.WriteFile(filepath.Join(specs, fmt.Sprintf("copy-%d.yaml", i)), data, 0o644)
	}
	if err := syscall.Mkfifo(filepath.Join(specs, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, status := gpuctk(t, "cdi", "generate", "--config", cfg, "--simulate", "l40s", "--output", out)
	copies := filepath.Join(specs, "copy-0.yaml") + ", " + filepath.Join(specs, "copy-1.yaml") + ", " + filepath.Join(specs, "copy-2.yaml") + " and 2 more define 16 device names that " + out + " defines"
	fifo := "gpuctk: warning: spec beside nvidia.yaml not loaded: " + filepath.Join(specs, "fifo.yaml") + ": a FIFO, not a spec file"
	if status != 1 || !strings.Contains(stderr, copies) || !strings.Contains(stderr, fifo) {
		t.Errorf("exit %d, stderr:\n%s\nwant 1, %q and %q", status, stderr, copies, fifo)
	}
}
