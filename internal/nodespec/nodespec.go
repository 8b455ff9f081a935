// Package nodespec reads a node's host and configuration into what it
// offers and the CDI spec for it, as `gpuctk cdi generate` does: the one
// load the Kubernetes components (the device plugin, the DRA driver)
// share, at start and at every configuration change.
package nodespec

import (
	"log/slog"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/offer"
)

// Node is a node's resolution and its spec.
type Node struct {
	Config  *config.Config
	Set     *offer.Set
	Spec    []byte
	Kind    string
	Summary cdi.Summary
	// Simulated is set for a host read from a --simulate profile.
	Simulated bool
}

// Config loads the configuration at path (explicit: named by the user,
// so it must exist) and applies the overrides set by flags.
func Config(path string, explicit bool, set map[string]string) (*config.Config, error) {
	cfg, err := config.Load(path, explicit)
	if err != nil {
		return nil, err
	}
	if len(set) > 0 {
		if err := cfg.Override(set); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// Load reads the host (the simulated profile simulate, or NVML under the
// driver root) and builds what cfg offers and its YAML spec. A simulated
// host gets a standard driver install's files unless rootsGiven (a
// --driver-root or --dev-root was given): then, as a real host, those
// found under the roots.
func Load(cfg *config.Config, simulate string, rootsGiven bool, log *slog.Logger) (*Node, error) {
	search := driver.WithLibrarySearchPaths(cfg.CDI.LibrarySearchPaths...)
	h, p, err := nvmlhost.Load(simulate, cfg.CDI.DriverRoot, search)
	if err != nil {
		return nil, err
	}
	if p == nil {
		h.ReadPlatform(cfg.CDI.DevRootOrDriver()) // a simulated host's are its profile's
	}
	offered, err := offer.Resolve(h, cfg)
	if err != nil {
		return nil, err
	}
	var files *driver.Files
	if p != nil && !rootsGiven {
		files = driver.Standard(h.DriverVersion, p.UVMMajor, p.CapsMajor)
	} else if files, err = driver.Discover(cfg.CDI.DriverRoot, cfg.CDI.DevRootOrDriver(), h.DriverVersion, search); err != nil {
		return nil, err
	} else if *cfg.CDI.DriverFolder {
		// As `gpuctk cdi generate` does; a driver upgrade replaces the
		// kernel module, so an older version's folder serves no container.
		folder, err := files.Gather(cfg.CDI.DriverRoot, true, cdi.FolderOptions(cfg)...)
		if err != nil {
			log.Info("the driver's files are mounted one by one, not as one folder ([cdi] driver-folder = false stops trying)", "why", err)
		} else if folder != "" {
			if err := driver.PruneFolders(folder); err != nil {
				log.Warn("old driver folders not removed", "err", err)
			}
		}
	}
	spec, kind, sum, err := cdi.Build(offered, files, cfg, "yaml")
	if err != nil {
		return nil, err
	}
	return &Node{Config: cfg, Set: offered, Spec: spec, Kind: kind, Summary: sum, Simulated: p != nil}, nil
}
