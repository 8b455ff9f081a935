package config

import (
	"fmt"

	"github.com/gpuctk/gpuctk/inventory"
)

// Shared is a device offered as replicas, with the entry that shares it.
type Shared struct {
	inventory.Device
	*Sharing
	// Entry is the 1-based position of the [[sharing]] entry in the file.
	Entry int
}

// ThreadPercentage returns the MPS active thread percentage of each
// replica: the configured one, or 100/replicas.
func (s Shared) ThreadPercentage() int {
	if s.ActiveThreadPercentage > 0 {
		return s.ActiveThreadPercentage
	}
	return max(1, 100/s.Replicas)
}

// MemoryLimitMiB returns the MPS pinned device memory limit of each
// replica in MiB: the configured one, or device memory / replicas.
func (s Shared) MemoryLimitMiB() uint64 {
	if s.PinnedMemoryLimit > 0 {
		return s.PinnedMemoryLimit.MiB()
	}
	return s.Device.MemoryMiB() / uint64(s.Replicas)
}

// Resolve matches the [[sharing]] entries against a host's devices and
// returns the shared devices in the host's device order. A selector that
// matches nothing and two entries claiming one device are errors naming
// the file and the entries.
func (c *Config) Resolve(host *inventory.Host) ([]Shared, error) {
	owner := map[string]int{} // device UUID -> entry index
	for i := range c.Sharing {
		s := &c.Sharing[i]
		for _, sel := range s.Devices {
			devs, err := host.Select(sel)
			if err != nil {
				return nil, c.entryError(i, err)
			}
			for _, d := range devs {
				if j, ok := owner[d.UUID()]; ok && j != i {
					return nil, c.entryError(i, fmt.Errorf("%s is already shared by entry %d: a device may be claimed by one entry only", d, j+1))
				}
				owner[d.UUID()] = i
			}
		}
	}
	var out []Shared
	for _, d := range host.Devices() {
		if i, ok := owner[d.UUID()]; ok {
			// "gpu:mig" alone names MIG devices only. nil is the
			// default (index names), as in a Config built in code.
			if c.CDI.ReplicaNames != nil && len(d.NamesIn(c.CDI.ReplicaNames)) == 0 {
				return nil, fmt.Errorf(`%s: [cdi] "replica-names" %q gives the replicas of %s (shared by [[sharing]] entry %d) no name: add "index" or "uuid"`,
					c.where(), c.CDI.ReplicaNames, d, i+1)
			}
			out = append(out, Shared{Device: d, Sharing: &c.Sharing[i], Entry: i + 1})
		}
	}
	return out, nil
}

func (c *Config) entryError(i int, err error) error {
	return fmt.Errorf("%s: [[sharing]] entry %d: %w", c.where(), i+1, err)
}

// where names the configuration in errors: "config FILE", or "config"
// for the defaults.
func (c *Config) where() string {
	if c.Path != "" {
		return "config " + c.Path
	}
	return "config"
}
