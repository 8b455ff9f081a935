package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/cdi"
)

func cdiCommand() *cli.Command {
	return &cli.Command{
		Name:  "cdi",
		Usage: "generate and list CDI specs",
		Subcommands: []*cli.Command{
			{
				Name:  "generate",
				Usage: "write the CDI spec of this host (stdout when no --output)",
				Flags: append(hostFlags(),
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, EnvVars: envVar("output"), Usage: "spec file to write atomically, e.g. /var/run/cdi/nvidia.yaml"},
					&cli.StringFlag{Name: "format", EnvVars: envVar("format"), Usage: "yaml or json (default: from the --output extension, else yaml)"},
					&cli.StringFlag{Name: "hook-path", EnvVars: envVar("hook-path"), Usage: "gpuctk-hook on the host (default: config [cdi] hook-path)"},
					&cli.StringFlag{Name: "vendor", EnvVars: envVar("vendor"), Usage: "vendor of the spec's kind (default: config, nvidia.com)"},
					&cli.StringFlag{Name: "class", EnvVars: envVar("class"), Usage: "class of the spec's kind (default: config, gpu)"},
					&cli.BoolFlag{Name: "if-driver", EnvVars: envVar("if-driver"), Usage: "when the NVIDIA kernel module is not loaded (no /proc/driver/nvidia/version under the dev root), say so and exit 0 without writing anything (for boot-time refreshes)"},
				),
				Action: generate,
			},
			{
				Name:  "list",
				Usage: "list the devices of the specs in the spec dirs",
				Flags: []cli.Flag{
					configFlag(),
					&cli.StringSliceFlag{Name: "spec-dir", EnvVars: envVar("spec-dir"), Usage: "spec dir to read (repeatable; default: config [cdi] spec-dirs)"},
					&cli.BoolFlag{Name: "json", EnvVars: envVar("json"), Usage: "print JSON"},
				},
				Action: list,
			},
		},
	}
}

func generate(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	// A host without a loaded driver is not an error for the refresh unit:
	// it runs at every boot and on every driver change, GPU or not.
	if c.Bool("if-driver") && c.String("simulate") == "" {
		version := filepath.Join(cfg.CDI.DevRootOrDriver(), "proc/driver/nvidia/version")
		if _, err := os.Stat(version); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "gpuctk: no NVIDIA driver loaded (%s does not exist): no spec written\n", version)
			return nil
		}
	}
	format, err := cdi.FormatFor(c.String("format"), c.String("output"))
	if err != nil {
		return err
	}
	set, p, err := resolve(c, cfg)
	if err != nil {
		return err
	}
	files, err := loadFiles(c, cfg, set.Host, p)
	if err != nil {
		return err
	}
	data, kind, sum, err := cdi.Build(set, files, cfg, format)
	if err != nil {
		return err
	}
	out := c.String("output")
	if out == "" {
		if _, err := os.Stdout.Write(data); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "gpuctk: %s spec: %s\n", kind, sum)
		return nil
	}
	if err := cdi.WriteSpec(out, data); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gpuctk: wrote %s spec to %s: %s\n", kind, out, sum)
	return nil
}

func list(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	devices, specErrs, err := cdi.List(cfg.CDI.SpecDirs)
	if err != nil {
		return err
	}
	for _, e := range specErrs {
		fmt.Fprintln(os.Stderr, "gpuctk: warning: spec not loaded:", e)
	}
	if c.Bool("json") {
		if devices == nil {
			devices = []cdi.Listed{}
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(devices)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "DEVICE\tSPEC")
	for _, d := range devices {
		fmt.Fprintf(w, "%s\t%s\n", d.Name, d.Spec)
	}
	return w.Flush()
}
