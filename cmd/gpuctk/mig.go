package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/mig"
)

// migFlags select the host and the layout.
func migFlags(layout bool) []cli.Flag {
	flags := []cli.Flag{
		configFlag(),
		&cli.StringFlag{Name: "simulate", EnvVars: envVar("simulate"), Usage: "a simulated host's profile file instead of NVML (apply rewrites it); an embedded profile (" + strings.Join(inventory.Profiles(), ", ") + ") is read-only"},
		&cli.StringFlag{Name: "driver-root", EnvVars: envVar("driver-root"), Usage: "where the driver's files are installed (default: config, /)"},
		&cli.StringFlag{Name: "dev-root", EnvVars: envVar("dev-root"), Usage: "where /dev and /proc are (default: config, else the driver root)"},
		libraryPathFlag(),
	}
	if layout {
		flags = append(flags,
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, EnvVars: envVar("mig-config-file"), Usage: "mig-parted config file (default: config [mig] config-file, else the built-in layouts: NVIDIA's config-default.yaml)"},
			&cli.StringFlag{Name: "config-name", Aliases: []string{"c"}, EnvVars: envVar("mig-config"), Usage: "the config (layout) to use, e.g. all-1g.5gb (default: config [mig] config)"},
		)
	}
	return flags
}

func migCommand() *cli.Command {
	return &cli.Command{
		Name:  "mig",
		Usage: "partition GPUs into MIG devices from a mig-parted config",
		Subcommands: []*cli.Command{
			{
				Name:  "apply",
				Usage: "plan and make the changes that give the GPUs a layout, then regenerate the spec",
				Flags: append(migFlags(true),
					&cli.BoolFlag{Name: "dry-run", EnvVars: envVar("dry-run"), Usage: "print the plan only"},
					&cli.BoolFlag{Name: "if-configured", EnvVars: envVar("if-configured"), Usage: "when no layout is chosen, say so and exit 0 (for the boot unit)"},
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "/var/run/cdi/nvidia.yaml", EnvVars: envVar("output"), Usage: "spec file to regenerate after a change (none with --simulate, unless given)"},
					&cli.StringFlag{Name: "format", EnvVars: envVar("format"), Usage: "spec format, yaml or json (default: from the --output extension)"},
					&cli.StringFlag{Name: "lock", EnvVars: envVar("mig-lock"), Usage: "the file whose lock keeps two applies from changing the GPUs at once; a second apply is refused while the first runs (default: " + mig.DefaultLockPath + "; with --simulate FILE, FILE.lock)"},
				),
				Action: migApply,
			},
			{
				Name:   "assert",
				Usage:  "exit 0 when the GPUs have a layout, 1 with the differences otherwise",
				Flags:  migFlags(true),
				Action: migAssert,
			},
			{
				Name:  "export",
				Usage: "print the GPUs' layout as a mig-parted config",
				Flags: append(migFlags(false),
					&cli.StringFlag{Name: "config-name", Aliases: []string{"c"}, Value: "current", Usage: "name of the exported config"},
				),
				Action: migExport,
			},
		},
	}
}

// layoutName is the layout to apply or assert: -c, else config [mig]
// config (the boot unit's).
func layoutName(c *cli.Context, cfg *config.Config) string {
	return cmp.Or(c.String("config-name"), cfg.MIG.Config)
}

// layoutFile is the mig-parted file to read the layout from: -f, else
// config [mig] config-file, else the built-in layouts.
func layoutFile(c *cli.Context, cfg *config.Config) string {
	return cmp.Or(c.String("file"), cfg.MIG.ConfigFile)
}

// migDevice opens what changes the GPUs and tells their MIG profiles:
// NVML on a real host, the file of --simulate FILE; nil for an embedded
// simulated profile, which nothing changes and whose profiles are the
// model data's. close releases it.
func migDevice(c *cli.Context, cfg *config.Config) (dev mig.Device, close func(), err error) {
	sim := c.String("simulate")
	switch {
	case sim != "" && !strings.ContainsRune(sim, '/') && !strings.HasSuffix(sim, ".toml"):
		return nil, func() {}, nil
	case sim != "":
		s, err := mig.OpenSimulator(sim)
		return s, func() {}, err
	}
	lib, err := driver.FindLibrary(cfg.CDI.DriverRoot, "libnvidia-ml.so.1", driver.WithLibrarySearchPaths(cfg.CDI.LibrarySearchPaths...))
	if err != nil {
		return nil, nil, err
	}
	src, err := nvmlhost.Open(lib)
	if err != nil {
		return nil, nil, err
	}
	m, err := src.MIG(nvmlhost.WithNote(func(n string) { fmt.Fprintln(c.App.ErrWriter, "gpuctk: note:", n) }))
	if err != nil {
		return nil, nil, err
	}
	return m, m.Close, nil
}

// migPlan reads the config and the host and plans the chosen layout, with
// the profiles dev tells (NVML's on a real host) when it is not nil.
func migPlan(c *cli.Context, cfg *config.Config, dev mig.Device) (*mig.Plan, *inventory.Host, error) {
	if c.NArg() > 0 {
		return nil, nil, fmt.Errorf("unexpected argument %q: give the layout with -c NAME", c.Args().First())
	}
	name := layoutName(c, cfg)
	if name == "" {
		return nil, nil, errors.New("no layout chosen: give -c NAME, e.g. -c all-1g.5gb (gpuctk mig export shows the current one)")
	}
	mc, err := mig.LoadConfig(layoutFile(c, cfg))
	if err != nil {
		return nil, nil, err
	}
	h, _, err := loadInventory(c, cfg)
	if err != nil {
		return nil, nil, err
	}
	var opts []mig.PlanOption
	if dev != nil {
		opts = append(opts, mig.WithProfiles(dev))
	}
	p, err := mig.Compute(h, mc, name, opts...)
	return p, h, err
}

func migApply(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if c.Bool("if-configured") && layoutName(c, cfg) == "" {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: no MIG layout chosen: MIG left as it is")
		return nil
	}
	sim := c.String("simulate")
	embedded := sim != "" && !strings.ContainsRune(sim, '/') && !strings.HasSuffix(sim, ".toml")
	// The plan is made under the lock, from the layout a running apply
	// leaves; a dry run and an embedded profile change nothing.
	if !c.Bool("dry-run") && !embedded {
		path := c.String("lock")
		switch {
		case path != "":
		case sim != "":
			path = sim + ".lock"
		default:
			path = mig.DefaultLockPath
		}
		release, err := mig.Lock(path)
		if err != nil {
			return err
		}
		defer release()
	}
	// A dry run reads the profiles through the device too: NVML's, on a
	// real host, and changes nothing.
	dev, closeDev, err := migDevice(c, cfg)
	if err != nil {
		return err
	}
	defer closeDev()
	p, _, err := migPlan(c, cfg, dev)
	if err != nil {
		return err
	}
	if embedded && !c.Bool("dry-run") && !p.Empty() {
		return fmt.Errorf("--simulate %s is an embedded profile, which apply cannot change: copy it to a file (inventory/profiles/%s.toml) and give its path, or use --dry-run", sim, sim)
	}
	for _, l := range p.Lines() {
		fmt.Fprintln(c.App.Writer, l)
	}
	if c.Bool("dry-run") || embedded {
		return nil
	}
	// A rehearsal on a simulated host writes no spec unless asked: the
	// default --output is the real host's spec, which the simulated
	// host's devices would replace.
	noSpec := sim != "" && !c.IsSet("output")
	if p.Empty() {
		if noSpec {
			return nil
		}
		// The GPUs have the layout, but an apply that changed them may
		// have failed to write the spec (a [[sharing]] selector the new
		// layout lacks, a bad --format): write it now if it is stale, so
		// that running apply again finishes the job. A fresh spec is left
		// as it is.
		if c.String("output") == "-" {
			return nil
		}
		return generateSpec(c, true)
	}
	err = mig.Apply(p, dev, mig.WithMPSStateRoot(cfg.MPS.StateRoot))
	if s, ok := dev.(*mig.Simulator); ok {
		// A simulated GPU keeps what was done before a failure, as a real
		// one does.
		if serr := s.Save(); err == nil {
			err = serr
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "gpuctk: applied MIG config %q\n", p.Layout)
	if noSpec {
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: --simulate without --output: no spec written (gpuctk cdi generate --simulate %s shows it)\n", sim)
		return nil
	}
	// The same step as `gpuctk cdi generate --output FILE`, on the new
	// layout: this command has its flags.
	return generate(c)
}

func migAssert(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	dev, closeDev, err := migDevice(c, cfg)
	if err != nil {
		return err
	}
	defer closeDev()
	p, _, err := migPlan(c, cfg, dev)
	if err != nil {
		return err
	}
	if p.Empty() {
		// As mig-parted's assert: a layout that selects no GPU holds.
		if p.Selected == 0 {
			fmt.Fprintf(c.App.Writer, "MIG config %q selects none of the GPUs\n", p.Layout)
		} else {
			fmt.Fprintf(c.App.Writer, "the GPUs have MIG config %q\n", p.Layout)
		}
		return nil
	}
	for _, d := range p.Differences() {
		fmt.Fprintln(c.App.Writer, d)
	}
	return fmt.Errorf("the GPUs do not have MIG config %q (%d differ)", p.Layout, len(p.GPUs))
}

func migExport(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", c.Args().First())
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	h, _, err := loadInventory(c, cfg)
	if err != nil {
		return err
	}
	data, err := mig.Export(h, c.String("config-name"))
	if err != nil {
		return err
	}
	_, err = c.App.Writer.Write(data)
	return err
}
