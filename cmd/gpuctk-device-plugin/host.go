package main

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/deviceplugin"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/offer"
)

// envVar is the environment variable a flag reads: GPUCTK_KUBELET_DIR for
// --kubelet-dir.
func envVar(flag string) []string {
	return []string{"GPUCTK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Value: config.DefaultPath, EnvVars: envVar("config"), Usage: "configuration file, [kubernetes] included; reloaded when it changes"},
		&cli.StringFlag{Name: "kubelet-dir", Value: "/var/lib/kubelet/device-plugins", EnvVars: envVar("kubelet-dir"), Usage: "folder of kubelet.sock and the plugin's sockets"},
		&cli.StringFlag{Name: "cdi-dir", Value: "/var/run/cdi", EnvVars: envVar("cdi-dir"), Usage: "where the spec whose names the plugin hands out is written (" + cdi.DefaultSpecName + ")"},
		&cli.StringFlag{Name: "simulate", EnvVars: envVar("simulate"), Usage: "describe a simulated host instead of asking NVML: an embedded profile (" + strings.Join(inventory.Profiles(), ", ") + ") or a profile file"},
		&cli.StringFlag{Name: "driver-root", EnvVars: envVar("driver-root"), Usage: "where the driver's files are installed (default: config [cdi] driver-root, /)"},
		&cli.StringFlag{Name: "dev-root", EnvVars: envVar("dev-root"), Usage: "where /dev and /proc are (default: config [cdi] dev-root, else the driver root)"},
		&cli.DurationFlag{Name: "health-interval", Value: 10 * time.Second, EnvVars: envVar("health-interval"), Usage: "how often device nodes and MPS daemons are checked"},
	}
}

// load reads the configuration and the host, as `gpuctk cdi generate`
// does, and resolves what to advertise; it runs at start and at every
// configuration change.
func load(c *cli.Context) (*deviceplugin.State, error) {
	cfg, err := config.Load(c.String("config"), c.IsSet("config"))
	if err != nil {
		return nil, err
	}
	set := map[string]string{}
	for _, name := range []string{"driver-root", "dev-root"} {
		if c.IsSet(name) {
			set[name] = c.String(name)
		}
	}
	if len(set) > 0 {
		if err := cfg.Override(set); err != nil {
			return nil, err
		}
	}
	h, p, err := loadInventory(c, cfg)
	if err != nil {
		return nil, err
	}
	offered, err := offer.Resolve(h, cfg)
	if err != nil {
		return nil, err
	}
	var files *driver.Files
	if p != nil && !c.IsSet("driver-root") && !c.IsSet("dev-root") {
		files = driver.Standard(h.DriverVersion, p.UVMMajor, p.CapsMajor)
	} else if files, err = driver.Discover(cfg.CDI.DriverRoot, cfg.CDI.DevRootOrDriver(), h.DriverVersion); err != nil {
		return nil, err
	}
	spec, kind, _, err := cdi.Build(offered, files, cfg, "yaml")
	if err != nil {
		return nil, err
	}
	return deviceplugin.NewState(cfg, offered, spec, kind, p != nil)
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
	lib, err := driver.FindLibrary(cfg.CDI.DriverRoot, "libnvidia-ml.so.1")
	if err != nil {
		return nil, nil, err
	}
	src, err := nvmlhost.Open(lib)
	if err != nil {
		return nil, nil, err
	}
	h, err := src.Host()
	return h, nil, err
}
