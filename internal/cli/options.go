package cli

import (
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/mps"
)

// generatorOptions are spec options that come from other command groups:
// an MPS replica gets its daemon's client settings, mounts and check.
func generatorOptions(cfg *config.Config, hookPath string) []cdi.Option {
	return []cdi.Option{cdi.WithReplicaEdits(func(s config.Shared) (*specs.ContainerEdits, error) {
		if s.Strategy != config.MPS {
			return nil, nil
		}
		d := mps.NewDevice(s)
		// A spec must not offer replicas no daemon would serve.
		if err := d.Validate(); err != nil {
			return nil, err
		}
		e := mps.ReplicaEdits(cfg.MPS.StateRoot, hookPath, d)
		return &e, nil
	})}
}
