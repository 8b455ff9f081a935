package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/mps"
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
					&cli.StringSliceFlag{Name: "device-name-strategy", EnvVars: envVar("device-name-strategy"), Usage: "names whole devices get, as nvidia-ctk's flag: index, gpu:mig, uuid, type-index (repeatable; default: config [cdi] device-names, index, gpu:mig and uuid)"},
					&cli.BoolFlag{Name: "cuda-compat", EnvVars: envVar("cuda-compat"), Usage: "let the hook put an image's newer CUDA forward-compatibility libraries first, where every GPU of the host supports it (default: config [cdi] cuda-compat, true; --cuda-compat=false turns it off)"},
					&cli.BoolFlag{Name: "disable-device-node-modification", EnvVars: envVar("disable-device-node-modification"), Usage: "have the hook give containers a driver params file saying ModifyDeviceFiles: 0, so the CUDA driver in a container creates no device nodes (default: config [cdi] disable-device-node-modification, true)"},
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
					&cli.StringFlag{Name: "format", Value: "table", EnvVars: envVar("format"), Usage: "table, json or yaml"},
					&cli.BoolFlag{Name: "json", EnvVars: envVar("json"), Usage: "print JSON (--format json)"},
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
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: no NVIDIA driver loaded (%s does not exist): no spec written\n", version)
			return nil
		}
	}
	format, warning, err := cdi.FormatFor(c.String("format"), c.String("output"))
	if err != nil {
		return err
	}
	if warning != "" {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning:", warning)
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
		if _, err := c.App.Writer.Write(data); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: %s spec: %s\n", kind, sum)
		return nil
	}
	if err := cdi.WriteSpec(out, data); err != nil {
		return err
	}
	// A spec on disk is one runtimes use: its MPS mounts must resolve
	// even before the daemons start (see mps.MountPoints).
	if err := mps.MountPoints(set.MPS()); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "gpuctk: wrote %s spec to %s: %s\n", kind, out, sum)
	return nil
}

func list(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if f := c.String("format"); f != "table" && f != "json" && f != "yaml" {
		return &usageError{cmd: c.Command.HelpName, err: fmt.Errorf("--format %q is not known: use table, json or yaml", f)}
	}
	devices, conflicts, specErrs, err := cdi.List(cfg.CDI.SpecDirs)
	if err != nil {
		return err
	}
	for _, e := range specErrs {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning: spec not loaded:", e)
	}
	format := c.String("format")
	if c.Bool("json") {
		format = "json"
	}
	switch format {
	case "json", "yaml":
		if devices == nil {
			devices = []cdi.Listed{}
		}
		if err := printData(c.App.Writer, format, devices); err != nil {
			return err
		}
	case "table":
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "DEVICE\tSPEC")
		for _, d := range devices {
			fmt.Fprintf(w, "%s\t%s\n", d.Name, d.Spec)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	for _, cf := range conflicts {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: conflict:", cf)
	}
	switch n := len(conflicts); {
	case n == 1:
		return fmt.Errorf("1 pair of specs defines the same device names: CDI readers resolve none of them from one folder, and only the later folder's from two; remove or rename one spec")
	case n > 1:
		return fmt.Errorf("%d pairs of specs define the same device names: CDI readers resolve none of them from one folder, and only the later folder's from two; remove or rename one spec of each pair", n)
	}
	return nil
}

// printData prints v as indented JSON or as YAML.
func printData(w io.Writer, format string, v any) error {
	if format == "yaml" {
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		return enc.Close()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
