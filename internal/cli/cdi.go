package cli

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
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
)

func init() {
	commands = append(commands, &cli.Command{
		Name:  "cdi",
		Usage: "generate and list CDI specs",
		Subcommands: []*cli.Command{
			{
				Name:  "generate",
				Usage: "write the CDI spec of this host (stdout when no --output)",
				Flags: append(hostFlags(),
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "spec file to write atomically, e.g. /var/run/cdi/nvidia.yaml"},
					&cli.StringFlag{Name: "format", Usage: "yaml or json (default: from the --output extension, else yaml)"},
					&cli.StringFlag{Name: "hook-path", Usage: "gpuctk-hook on the host (default: config [cdi] hook-path)"},
					&cli.StringFlag{Name: "vendor", Usage: "vendor of the spec's kind (default: config, nvidia.com)"},
					&cli.StringFlag{Name: "class", Usage: "class of the spec's kind (default: config, gpu)"},
					&cli.BoolFlag{Name: "if-driver", Usage: "when the NVIDIA kernel module is not loaded (no /proc/driver/nvidia/version under the dev root), say so and exit 0 without writing anything (for boot-time refreshes)"},
				),
				Action: generate,
			},
			{
				Name:  "list",
				Usage: "list the devices of the specs in the spec dirs",
				Flags: []cli.Flag{
					configFlag(),
					&cli.StringSliceFlag{Name: "spec-dir", Usage: "spec dir to read (repeatable; default: config [cdi] spec-dirs)"},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				},
				Action: list,
			},
		},
	})
}

func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Value: config.DefaultPath, Usage: "configuration file"}
}

// hostFlags select where the host description comes from.
func hostFlags() []cli.Flag {
	return []cli.Flag{
		configFlag(),
		&cli.StringFlag{Name: "simulate", Usage: "describe a simulated host instead of asking NVML: an embedded profile (" + joinNames(inventory.Profiles()) + ") or a profile file"},
		&cli.StringFlag{Name: "driver-root", Usage: "where the driver's files are installed (default: config, /)"},
		&cli.StringFlag{Name: "dev-root", Usage: "where /dev and /proc are (default: config, else the driver root)"},
	}
}

func joinNames(n []string) string {
	s := ""
	for i, x := range n {
		if i > 0 {
			s += ", "
		}
		s += x
	}
	return s
}

// loadConfig reads --config; a missing file is an error only when the
// flag was given.
func loadConfig(c *cli.Context) (*config.Config, error) {
	return config.Load(c.String("config"), c.IsSet("config"))
}

// host is a host's description and its driver files.
type host struct {
	*inventory.Host
	Files *driver.Files
}

// loadInventory describes the host from --simulate (returning its profile
// too) or, without it, from NVML found under the driver root.
func loadInventory(c *cli.Context, cfg *config.Config) (*inventory.Host, *inventory.Profile, error) {
	if name := c.String("simulate"); name != "" {
		p, err := inventory.LoadProfile(name)
		if err != nil {
			return nil, nil, err
		}
		h, err := p.Host()
		return h, p, err
	}
	lib, err := driver.FindLibrary(driverRoot(c, cfg), "libnvidia-ml.so.1")
	if err != nil {
		return nil, nil, err
	}
	src, err := openNVML(lib)
	if err != nil {
		return nil, nil, err
	}
	h, err := src.Host()
	return h, nil, err
}

// loadHost describes the host and finds its files: under the driver root
// for a real host or when --driver-root or --dev-root is given; from the
// profile's standard layout for a simulated host without a root.
func loadHost(c *cli.Context, cfg *config.Config) (*host, error) {
	h, p, err := loadInventory(c, cfg)
	if err != nil {
		return nil, err
	}
	if p != nil && !c.IsSet("driver-root") && !c.IsSet("dev-root") {
		return &host{Host: h, Files: driver.Standard(h.DriverVersion, p.UVMMajor, p.CapsMajor)}, nil
	}
	files, err := driver.Discover(driverRoot(c, cfg), devRoot(c, cfg), h.DriverVersion)
	if err != nil {
		return nil, err
	}
	return &host{Host: h, Files: files}, nil
}

// devRoot returns where /dev and /proc are: --dev-root, else the config,
// else the driver root.
func devRoot(c *cli.Context, cfg *config.Config) string {
	r := cfg.CDI.DevRoot
	if c.IsSet("dev-root") {
		r = c.String("dev-root")
	}
	if r == "" {
		r = driverRoot(c, cfg)
	}
	return r
}

func generate(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	// A host without a loaded driver is not an error for the refresh unit:
	// it runs at every boot and on every driver change, GPU or not.
	if c.Bool("if-driver") && c.String("simulate") == "" {
		version := filepath.Join(devRoot(c, cfg), "proc/driver/nvidia/version")
		if _, err := os.Stat(version); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "gpuctk: no NVIDIA driver loaded (%s does not exist): no spec written\n", version)
			return nil
		}
	}
	format, err := cdi.FormatFor(c.String("format"), c.String("output"))
	if err != nil {
		return err
	}
	h, err := loadHost(c, cfg)
	if err != nil {
		return err
	}
	shared, err := cfg.Resolve(h.Host)
	if err != nil {
		return err
	}
	vendor, class, hookPath := cfg.CDI.Vendor, cfg.CDI.Class, cfg.CDI.HookPath
	if c.IsSet("vendor") {
		vendor = c.String("vendor")
	}
	if c.IsSet("class") {
		class = c.String("class")
	}
	if c.IsSet("hook-path") {
		hookPath = c.String("hook-path")
	}
	g := cdi.New(append(generatorOptions(cfg, hookPath), cdi.WithKind(vendor, class), cdi.WithHookPath(hookPath), cdi.WithSharing(shared), cdi.WithReplicaNames(cfg.CDI.ReplicaNames))...)
	spec, sum, err := g.Generate(h.Host, h.Files)
	if err != nil {
		return err
	}
	data, err := cdi.Marshal(spec, format)
	if err != nil {
		return err
	}
	out := c.String("output")
	if out == "" {
		if _, err := os.Stdout.Write(data); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "gpuctk: %s spec: %s\n", spec.Kind, sum)
		return nil
	}
	if err := cdi.WriteSpec(out, data); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gpuctk: wrote %s spec to %s: %s\n", spec.Kind, out, sum)
	return nil
}

func list(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	dirs := cfg.CDI.SpecDirs
	if c.IsSet("spec-dir") {
		dirs = c.StringSlice("spec-dir")
	}
	devices, specErrs, err := cdi.List(dirs)
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
