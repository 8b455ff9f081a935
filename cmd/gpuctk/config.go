package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/readfile"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/nvconfig"
	"github.com/gpuctk/gpuctk/offer"
)

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "work with gpuctk's configuration",
		Subcommands: []*cli.Command{{
			Name:      "import-device-plugin",
			Usage:     "convert an NVIDIA k8s-device-plugin config (or a ConfigMap of them) to gpuctk's config.toml",
			ArgsUsage: "FILE (- for stdin)",
			Description: "Reads an NVIDIA k8s-device-plugin config (version v1, YAML or JSON) and prints the\n" +
				"equivalent gpuctk config.toml on stdout. A ConfigMap whose data keys each hold such a\n" +
				"config gives one config per key: on stdout, each under a \"# --- KEY\" line; with\n" +
				"--output-dir, written as DIR/KEY.toml. A setting gpuctk cannot express is an error\n" +
				"naming the field; nothing is written then.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "output-dir", EnvVars: envVar("output-dir"), Usage: "write each config as `DIR`/KEY.toml (KEY: config for a plain config)"},
			},
			Action: configImport,
		}, {
			Name:  "check",
			Usage: "check a configuration against this host (or --simulate PROFILE) as gpuctk-device-plugin would, and print the resources it advertises",
			Description: "Resolves the configuration on the host as `cdi generate`, `labels` and\n" +
				"gpuctk-device-plugin do, and prints each Kubernetes resource the plugin would\n" +
				"advertise with its devices and replicas. Warnings (a resource mixing whole devices\n" +
				"and replicas, or pooling devices of several kinds) go to stderr; what the plugin\n" +
				"would refuse is an error, and the exit status is 1.",
			Flags:  hostFlags(),
			Action: configCheck,
		}},
	}
}

func configCheck(c *cli.Context) error {
	if c.NArg() > 0 {
		return &usageError{cmd: c.Command.HelpName, err: fmt.Errorf("unexpected argument %q: give the configuration with --config", c.Args().First())}
	}
	path := c.String("config")
	if data, err := readfile.Limited(path, nvconfig.MaxSize); err == nil && nvconfig.IsConfigMap(data) {
		return checkConfigMap(c, path, data)
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	h, _, err := loadInventory(c, cfg)
	if err != nil {
		return err
	}
	return checkOne(c, h, cfg)
}

// checkOne resolves cfg on h and prints its resources, its warnings on
// stderr; what the plugin refuses is the error.
func checkOne(c *cli.Context, h *inventory.Host, cfg *config.Config) error {
	set, err := offer.Resolve(h, cfg)
	if err != nil {
		return err
	}
	for _, w := range append(set.Warnings, set.Notes...) {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning:", w)
	}
	if set.Refused != nil {
		return fmt.Errorf("gpuctk-device-plugin refuses this configuration: %w", set.Refused)
	}
	_, err = io.WriteString(c.App.Writer, offer.Summary(set.Resources))
	return err
}

// checkConfigMap checks each config of a ConfigMap of NVIDIA's configs
// (as the plugin runs them from --config-dir), each under a "# --- KEY"
// line; it fails when the plugin would refuse any.
func checkConfigMap(c *cli.Context, path string, data []byte) error {
	outs, err := nvconfig.Convert(data, path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	base, err := loadConfig(c) // where the host is: --driver-root and the like
	if err != nil && !c.IsSet("simulate") {
		return err
	}
	if base == nil {
		base = config.Default()
	}
	h, _, err := loadInventory(c, base)
	if err != nil {
		return err
	}
	var refused []string
	for _, o := range outs {
		fmt.Fprintf(c.App.Writer, "# --- %s\n", o.Key)
		for _, w := range o.Warnings {
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: warning: %s: %s\n", path, w)
		}
		cfg := config.Default() // a blank key: the defaults, as the plugin runs it
		if o.TOML != nil {
			if cfg, err = config.Parse(o.TOML); err != nil {
				return fmt.Errorf("%s, key %s: %w", path, o.Key, err)
			}
		}
		cfg.Path = path + ", key " + o.Key
		if err := checkOne(c, h, cfg); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: %s: %v\n", o.Key, err)
			refused = append(refused, o.Key)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("%s: gpuctk-device-plugin refuses %d of its %d configurations on this host: %s", path, len(refused), len(outs), strings.Join(refused, ", "))
	}
	return nil
}

func configImport(c *cli.Context) error {
	if c.NArg() != 1 {
		return &usageError{cmd: c.Command.HelpName, err: fmt.Errorf("want one FILE (- for stdin), got %d arguments", c.NArg())}
	}
	name := c.Args().First()
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	} else {
		name = "stdin"
	}
	outs, err := nvconfig.Read(r, name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, o := range outs {
		for _, w := range o.Warnings {
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: warning: %s: %s\n", name, w)
		}
	}
	dir := c.String("output-dir")
	if dir == "" {
		_, err := c.App.Writer.Write(nvconfig.Format(outs))
		return err
	}
	// Every config converted before anything is written, and written all
	// or none.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var files []atomicfile.File
	for _, o := range outs {
		if o.TOML == nil {
			continue
		}
		key := o.Key
		if key == "" {
			key = "config"
		}
		files = append(files, atomicfile.File{Path: filepath.Join(dir, key+".toml"), Data: o.TOML, Mode: 0o644})
	}
	if err := atomicfile.WriteFiles(files); err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintf(c.App.ErrWriter, "wrote %s\n", f.Path)
	}
	return nil
}
