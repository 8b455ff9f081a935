package cdi

import (
	"path/filepath"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/offer"
)

// DefaultSpecName is the file `gpuctk cdi generate` and the device plugin
// write in a spec dir: one file, so no two specs define the same names.
const DefaultSpecName = "nvidia.yaml"

// Build returns the bytes of the spec the configuration describes, in
// format ("yaml" or "json"), and its kind. Every writer of the spec calls
// it, so the CLI and the device plugin write the same bytes.
func Build(set *offer.Set, f *driver.Files, cfg *config.Config, format string) ([]byte, string, Summary, error) {
	spec, sum, err := ForConfig(cfg).Generate(set, f)
	if err != nil {
		return nil, "", sum, err
	}
	rebase(spec, cfg.CDI.DriverRoot, cfg.CDI.HostDriverRoot)
	data, err := Marshal(spec, format)
	return data, spec.Kind, sum, err
}

// FolderOptions are how driver.Gather makes the driver folder under the
// configuration: in [cdi] driver-store where hard links under the driver
// root cannot be made. gpuctk that sees the driver root elsewhere than the
// host has it (in a container) never makes a store outside it: the spec
// names the store as gpuctk sees it, which is the host's folder only when
// mounted there (the device plugin's hostPath), never a folder of the
// container's own.
func FolderOptions(cfg *config.Config) []driver.FolderOption {
	c := cfg.CDI
	if c.DriverStore == "" {
		return nil
	}
	_, under := driver.Root(c.DriverRoot).Rel(c.DriverStore)
	elsewhere := c.HostDriverRoot != "" && filepath.Clean(c.HostDriverRoot) != filepath.Clean(c.DriverRoot)
	return []driver.FolderOption{driver.WithStore(c.DriverStore, under || !elsewhere)}
}

// rebase rewrites the host side of the driver's mounts from where gpuctk
// sees the driver root (from) to where the host has it (to): gpuctk in a
// container with the host's / at /driver-root writes a spec for the
// host's runtime, which mounts /usr/lib/..., not /driver-root/usr/lib/....
func rebase(spec *specs.Spec, from, to string) {
	if to == "" || filepath.Clean(to) == filepath.Clean(from) {
		return
	}
	from = filepath.Clean(from)
	move := func(p string) string {
		if rel, under := driver.Root(from).Rel(p); under {
			return filepath.Join(to, rel)
		}
		return p
	}
	mounts := spec.ContainerEdits.Mounts
	for _, d := range spec.Devices {
		if IsCapability(d.Name) {
			mounts = append(mounts[:len(mounts):len(mounts)], d.ContainerEdits.Mounts...)
		}
	}
	for _, m := range mounts {
		m.HostPath = move(m.HostPath)
	}
	// The hook reads the driver's params file on the host too.
	for _, h := range spec.ContainerEdits.Hooks {
		for i := 1; i < len(h.Args); i++ {
			if h.Args[i-1] == "--nvidia-params" {
				h.Args[i] = move(h.Args[i])
			}
		}
	}
}
