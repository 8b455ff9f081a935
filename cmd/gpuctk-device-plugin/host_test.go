package main

import (
	"context"
	"io"
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
// (here a resource mixing whole GPUs and replicas) is no state at all:
// the node's labels are not rewritten for it, so that a bad reload keeps
// the last good labels beside the last good spec.
func TestLoadBadConfigWritesNoLabels(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte("[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"), 0o644); err != nil {
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
	if err == nil || !strings.Contains(err.Error(), "resource nvidia.com/gpu would mix") {
		t.Fatalf("load: %v, want the mixed resource refused", err)
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
