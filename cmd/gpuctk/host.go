package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/nvconfig"
	"github.com/gpuctk/gpuctk/offer"
)

// envVar is the environment variable a flag reads: GPUCTK_DRIVER_ROOT for
// --driver-root.
func envVar(flag string) []string {
	return []string{"GPUCTK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config", Value: config.DefaultPath, EnvVars: envVar("config"), Usage: "configuration file"}
}

// hostFlags select where the host description comes from.
func hostFlags() []cli.Flag {
	return []cli.Flag{
		configFlag(),
		&cli.StringFlag{Name: "simulate", EnvVars: envVar("simulate"), Usage: "describe a simulated host instead of asking NVML: an embedded profile (" + strings.Join(inventory.Profiles(), ", ") + ") or a profile file"},
		&cli.StringFlag{Name: "driver-root", EnvVars: envVar("driver-root"), Usage: "where the driver's files are installed (default: config [cdi] driver-root, /)"},
		&cli.StringFlag{Name: "dev-root", EnvVars: envVar("dev-root"), Usage: "where /dev and /proc are (default: config [cdi] dev-root, else the driver root)"},
		&cli.StringFlag{Name: "host-driver-root", EnvVars: envVar("host-driver-root"), Usage: "where the host has the driver root, when gpuctk sees it elsewhere (in a container: --driver-root /driver-root --host-driver-root /); the spec's mounts name the host's paths (default: config [cdi] host-driver-root, else the driver root)"},
		libraryPathFlag(),
	}
}

// libraryPathFlag is nvidia-ctk's --library-search-path.
func libraryPathFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "library-search-path", EnvVars: envVar("library-search-path"), Usage: "a folder under the driver root holding the driver's libraries when no ld.so.cache lists them, such as GKE's /home/kubernetes/bin/nvidia/lib64 (repeatable; default: config [cdi] library-search-paths)"}
}

// debugf says something with --debug, on stderr.
func debugf(c *cli.Context, format string, args ...any) {
	if flagOn(c, "debug") {
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: debug: "+format+"\n", args...)
	}
}

// loadConfig reads --config (a missing file is an error only when the
// flag was given), then applies the flags that set configuration keys:
// flag, else environment, else file, else default.
func loadConfig(c *cli.Context) (*config.Config, error) {
	// An NVIDIA device plugin config runs converted, as the plugin runs it.
	cfg, warnings, err := nvconfig.Load(c.String("config"), c.IsSet("config"))
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: warning: %s (an NVIDIA device plugin config): %s\n", cfg.Path, w)
	}
	if cfg.Path != "" {
		debugf(c, "configuration from %s", cfg.Path)
	} else {
		debugf(c, "no %s: the default configuration", c.String("config"))
	}
	set := map[string]string{}
	for _, name := range c.FlagNames() {
		if config.Overridable(name) && c.IsSet(name) {
			if v := c.StringSlice(name); len(v) > 0 {
				set[name] = strings.Join(v, ",")
			} else {
				set[name] = c.String(name)
			}
		}
	}
	if len(set) == 0 {
		return cfg, nil
	}
	debugf(c, "set by flags or GPUCTK_ variables: %v", set)
	return cfg, cfg.Override(set)
}

// loadInventory describes the host from --simulate (returning its profile
// too) or, without it, from NVML found under the driver root.
func loadInventory(c *cli.Context, cfg *config.Config) (*inventory.Host, *inventory.Profile, error) {
	h, p, err := nvmlhost.Load(c.String("simulate"), cfg.CDI.DriverRoot, driver.WithLibrarySearchPaths(cfg.CDI.LibrarySearchPaths...))
	if err == nil && p == nil {
		h.ReadPlatform(cfg.CDI.DevRootOrDriver()) // a simulated host's are its profile's
	}
	if err == nil {
		if p != nil {
			debugf(c, "host from the simulated profile %s", p.Name)
		} else {
			debugf(c, "host from NVML under %s", cfg.CDI.DriverRoot)
		}
	}
	return h, p, err
}

// loadFiles finds the host's driver files: under the driver root for a
// real host or when --driver-root or --dev-root is given; from the
// profile's standard layout for a simulated host without a root.
//
// With [cdi] driver-folder, the files go into the driver folder
// (driver.Gather): made when create is set (generate), used when it is
// there already otherwise (check, info), so a check never writes.
func loadFiles(c *cli.Context, cfg *config.Config, h *inventory.Host, p *inventory.Profile, create bool) (f *driver.Files, folder string, err error) {
	if p != nil && !c.IsSet("driver-root") && !c.IsSet("dev-root") {
		debugf(c, "driver files: a standard install of %s (no --driver-root)", h.DriverVersion)
		return driver.Standard(h.DriverVersion, p.UVMMajor, p.CapsMajor), "", nil
	}
	f, err = driver.Discover(cfg.CDI.DriverRoot, cfg.CDI.DevRootOrDriver(), h.DriverVersion, driver.WithLibrarySearchPaths(cfg.CDI.LibrarySearchPaths...))
	if err != nil {
		return nil, "", err
	}
	debugf(c, "driver files under %s (devices under %s): %d control nodes, %d mounts, %d links", cfg.CDI.DriverRoot, cfg.CDI.DevRootOrDriver(), len(f.ControlNodes), len(f.Mounts), len(f.Links))
	for _, w := range f.Warnings {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning:", w)
	}
	if *cfg.CDI.DriverFolder {
		folder, err = f.Gather(cfg.CDI.DriverRoot, create, cdi.FolderOptions(cfg)...)
		switch {
		case err != nil:
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: note: the driver's files are mounted one by one, not as one folder: %v ([cdi] driver-folder = false stops trying)\n", err)
		default:
			debugf(c, "driver files in the folder %q and the driver's own folders %q mounted whole: %d files linked by the hook", folder, f.Whole, len(f.Linked))
		}
	}
	return f, folder, nil
}

// resolve reads the host and returns what it offers under the configuration.
func resolve(c *cli.Context, cfg *config.Config) (*offer.Set, *inventory.Profile, error) {
	h, p, err := loadInventory(c, cfg)
	if err != nil {
		return nil, nil, err
	}
	set, err := offer.Resolve(h, cfg)
	return set, p, err
}

// warnResolution says on stderr what the resolution warns of, and what
// gpuctk-device-plugin would refuse (Set.Refused): `cdi generate` and
// `labels` go on, as the spec and the labels serve a node the plugin
// refuses; `config check` fails on it.
func warnResolution(c *cli.Context, set *offer.Set) {
	for _, w := range set.Warnings {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning:", w)
	}
	if set.Refused != nil {
		for _, line := range strings.Split(set.Refused.Error(), "\n") {
			fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning: gpuctk-device-plugin refuses this configuration:", line)
		}
	}
}

// simulatedOnHostState reports whether this run describes a simulated
// host while dir is one of the real host's folders of state (see
// config.IsHostState): it makes nothing there.
func simulatedOnHostState(c *cli.Context, dir string) bool {
	return c.String("simulate") != "" && config.IsHostState(dir)
}
