package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

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
