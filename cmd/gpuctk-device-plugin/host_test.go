package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/deviceplugin"
	"github.com/gpuctk/gpuctk/labels"
)

// TestLoadBadConfigWritesNoLabels: a configuration the plugin refuses
// (here two entries sharing a resource with different strategies) is no
// state at all:
// the node's labels are not rewritten for it, so that a bad reload keeps
// the last good labels beside the last good spec.
func TestLoadBadConfigWritesNoLabels(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte("[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n[[sharing]]\ndevices = [\"1\"]\nstrategy = \"mps\"\nreplicas = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	labelsDir := t.TempDir()
	var err error
	app := &cli.App{Flags: flags(), Writer: io.Discard, ErrWriter: io.Discard, Action: func(c *cli.Context) error {
		_, err = load(c, slog.New(slog.DiscardHandler))
		return nil
	}}
	if err := app.Run([]string{"gpuctk-device-plugin", "--simulate", "l40s", "--config", cfgPath, "--labels-dir", labelsDir}); err != nil {
		t.Fatal(err)
	}
	if err == nil || !strings.Contains(err.Error(), "entries sharing a resource must use one strategy") {
		t.Fatalf("load: %v, want the resource of two strategies refused", err)
	}
	if _, err := os.Stat(filepath.Join(labelsDir, labels.FeatureFile)); err == nil {
		t.Error("labels written for a configuration the plugin refused")
	}
}

// TestLoadSocketTooLongWritesNoLabels: a resource whose socket path in
// --kubelet-dir is too long is refused too (the plugin cannot serve it);
// it is refused before the node's labels are written for it, as a
// configuration the resolution refuses is.
func TestLoadSocketTooLongWritesNoLabels(t *testing.T) {
	resource := strings.Repeat("d", 50) + ".example.com/" + strings.Repeat("x", 40)
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte("[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\nresource = \""+resource+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	labelsDir, kubeletDir := t.TempDir(), t.TempDir()
	var err error
	app := &cli.App{Flags: flags(), Writer: io.Discard, ErrWriter: io.Discard, Action: func(c *cli.Context) error {
		ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
		defer cancel()
		log := slog.New(slog.DiscardHandler)
		p := deviceplugin.New(func() (*deviceplugin.State, error) { return load(c, log) },
			deviceplugin.WithKubeletDir(kubeletDir), deviceplugin.WithCDIDir(t.TempDir()), deviceplugin.WithLogger(log))
		err = p.Run(ctx)
		return nil
	}}
	if err := app.Run([]string{"gpuctk-device-plugin", "--simulate", "l40s", "--config", cfgPath, "--labels-dir", labelsDir, "--kubelet-dir", kubeletDir}); err != nil {
		t.Fatal(err)
	}
	if err == nil || !strings.Contains(err.Error(), "over the 107 a Unix socket's path can hold") {
		t.Fatalf("Run: %v, want the resource's socket refused", err)
	}
	if _, err := os.Stat(filepath.Join(labelsDir, labels.FeatureFile)); err == nil {
		t.Error("labels written for a configuration the plugin refused")
	}
}

// TestStrayArgument: the plugin takes flags only. A word among them is
// refused, naming it: flags after it would be read as arguments and
// ignored (here --labels-dir), the plugin running without them.
func TestStrayArgument(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	app := &cli.App{Flags: flags(), Writer: io.Discard, ErrWriter: io.Discard, Action: run}
	err := app.Run([]string{"gpuctk-device-plugin", "--simulate", "l40s", "--config", cfgPath,
		"--cdi-dir", filepath.Join(dir, "cdi"), "--kubelet-dir", filepath.Join(dir, "missing"),
		"labels", "--labels-dir", filepath.Join(dir, "features.d")})
	if err == nil || !strings.Contains(err.Error(), `unexpected argument "labels"`) {
		t.Fatalf("run: %v, want the argument \"labels\" refused", err)
	}
}

// configMapVolume writes files as the kubelet writes a ConfigMap volume:
// each in a new timestamped folder, ..data linked to it (swapped by a
// rename), and each name a link through ..data.
func configMapVolume(t *testing.T, dir string, version int, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..2026_11_28_%d", version))
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrExist) {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// timeSliced is a configuration sharing every GPU n ways.
func timeSliced(n int) string {
	return fmt.Sprintf("[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = %d\n", n)
}

// TestPerNodeConfig: with --config-dir (a ConfigMap of configurations),
// the node's configuration is the one --config-name-file names (the
// node's nvidia.com/device-plugin.config label), else --config-default;
// a new name, or a new version of the ConfigMap, switches the plugin
// without a restart (seen in the labels it writes: the replicas of
// nvidia.com/gpu); a name the ConfigMap lacks keeps the last good
// configuration.
func TestPerNodeConfig(t *testing.T) {
	dir := t.TempDir()
	configs, labelsDir, nameFile := filepath.Join(dir, "configs"), filepath.Join(dir, "features.d"), filepath.Join(dir, "label", "name")
	for _, d := range []string{configs, filepath.Dir(nameFile), filepath.Join(dir, "kubelet")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	configMapVolume(t, configs, 1, map[string]string{"whole.toml": "", "shared4.toml": timeSliced(4)})
	startPlugin(t, "--simulate", "l40s", "--config-dir", configs, "--config-default", "whole", "--config-name-file", nameFile,
		"--labels-dir", labelsDir, "--cdi-dir", filepath.Join(dir, "cdi"), "--kubelet-dir", filepath.Join(dir, "kubelet"))
	waitReplicas := func(step, want string) { t.Helper(); waitLabel(t, labelsDir, step, "nvidia.com/gpu.replicas", want) }
	waitReplicas("no label: --config-default whole", "1")
	if err := os.WriteFile(nameFile, []byte("shared4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitReplicas("label shared4", "4")
	configMapVolume(t, configs, 2, map[string]string{"whole.toml": "", "shared4.toml": timeSliced(6)})
	waitReplicas("ConfigMap updated", "6")
	if err := os.WriteFile(nameFile, []byte("missing"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	waitReplicas("label naming no configuration: the last good one kept", "6")
	if err := os.WriteFile(nameFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitReplicas("label removed (the file emptied): --config-default", "1")
}

// TestConfigFile: how the node's configuration is chosen, and the one
// line a choice that cannot be made gives.
func TestConfigFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		args  []string
		label string // the name file's content; "-" for no file
		want  string // the file's name, or the error
	}{
		{"label", []string{"a.toml", "b"}, []string{"--config-default", "a"}, "b\n", "b"},
		{"default", []string{"a.toml", "b"}, []string{"--config-default", "a"}, "-", "a.toml"},
		{"empty label: default", []string{"a.toml", "b"}, []string{"--config-default", "a"}, "", "a.toml"},
		{"fallback: named default", []string{"default", "b"}, nil, "-", "default"},
		{"fallback: the only one", []string{"b.toml"}, nil, "-", "b.toml"},
		{"fallback: the defaults", []string{"a", "b"}, nil, "-", ""},
		{"unknown label", []string{"a", "b"}, nil, "c", `configuration "c" (named by NAMEFILE) is not in --config-dir DIR (it has: a, b): add it to the ConfigMap, or fix the node's nvidia.com/device-plugin.config label`},
		{"with --config", []string{"a"}, []string{"--config", "x.toml"}, "-", "--config and --config-dir: give one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			configs, nameFile := filepath.Join(dir, "configs"), filepath.Join(dir, "name")
			os.Mkdir(configs, 0o755)
			for _, f := range tc.files {
				os.WriteFile(filepath.Join(configs, f), nil, 0o644)
			}
			if tc.label != "-" {
				os.WriteFile(nameFile, []byte(tc.label), 0o644)
			}
			var got string
			app := &cli.App{Flags: flags(), Action: func(c *cli.Context) error {
				path, _, err := configFile(c)
				if err != nil {
					got = err.Error()
				} else if path != "" {
					got = filepath.Base(path)
				}
				return nil
			}}
			if err := app.Run(append([]string{"p", "--config-dir", configs, "--config-name-file", nameFile}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			want := strings.NewReplacer("NAMEFILE", nameFile, "DIR", configs).Replace(tc.want)
			if !strings.HasPrefix(got, want) || strings.Contains(got, "\n") {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

// startPlugin runs gpuctk-device-plugin with args until the test ends.
func startPlugin(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		app := &cli.App{Flags: flags(), Writer: io.Discard, ErrWriter: io.Discard, Action: run}
		done <- app.RunContext(ctx, append([]string{"gpuctk-device-plugin"}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

// waitLabel waits for the plugin's labels in labelsDir to hold key=want.
func waitLabel(t *testing.T, labelsDir, step, key, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(filepath.Join(labelsDir, labels.FeatureFile))
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, key+"="); ok {
				got = v
			}
		}
		if got == want {
			return
		}
	}
	t.Fatalf("%s: %s=%q, want %q", step, key, got, want)
}

// TestNVIDIAConfigMapAsIs: NVIDIA's ConfigMap, mounted as it is (a blank
// default key beside an NVIDIA config with 10 replicas), runs: the key the
// node's label names converted, the blank one as the defaults.
func TestNVIDIAConfigMapAsIs(t *testing.T) {
	dir := t.TempDir()
	configs, labelsDir, nameFile := filepath.Join(dir, "configs"), filepath.Join(dir, "features.d"), filepath.Join(dir, "name")
	os.MkdirAll(configs, 0o755)
	os.MkdirAll(filepath.Join(dir, "kubelet"), 0o755)
	configMapVolume(t, configs, 1, map[string]string{"default": "",
		"ls40": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n"})
	os.WriteFile(nameFile, []byte("ls40"), 0o644)
	startPlugin(t, "--simulate", "l40s", "--config-dir", configs, "--config-name-file", nameFile,
		"--labels-dir", labelsDir, "--cdi-dir", filepath.Join(dir, "cdi"), "--kubelet-dir", filepath.Join(dir, "kubelet"))
	waitLabel(t, labelsDir, "label ls40", "nvidia.com/gpu.replicas", "10")
	os.WriteFile(nameFile, nil, 0o644)
	waitLabel(t, labelsDir, "no label: the blank default key", "nvidia.com/gpu.replicas", "1")
}

// TestInstallHookTakesPathBack: a FIFO or a folder at the hook copy's
// path is replaced by the copy (as --hook-dir's folder on the host may
// hold), never followed or opened.
func TestInstallHookTakesPathBack(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(exe), "gpuctk-hook")); err != nil {
		// The test binary's folder has no hook: give it one.
		if err := os.WriteFile(filepath.Join(filepath.Dir(exe), "gpuctk-hook"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, plant := range map[string]func(string) error{
		"FIFO":   func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"folder": func(p string) error { return os.MkdirAll(filepath.Join(p, "x"), 0o755) },
	} {
		dir := t.TempDir()
		if err := plant(filepath.Join(dir, "gpuctk-hook")); err != nil {
			t.Fatal(err)
		}
		if err := installHook(dir); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi, err := os.Lstat(filepath.Join(dir, "gpuctk-hook")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v", name, fi, err)
		}
	}
}
