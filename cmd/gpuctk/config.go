package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/nvconfig"
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
		}},
	}
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
