package mig

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpuctk/gpuctk/inventory"
)

// Export writes the host's layout as a config file holding one config
// called name: GPUs with the same layout share an entry, and an entry
// that covers every GPU says "devices: all". Applying it to the same host
// changes nothing. A host with MIG devices that gpuctk cannot make (a
// compute instance smaller than its GPU instance, such as a 1c.3g.20gb)
// is refused, naming one: no layout of gpuctk's describes it.
func Export(h *inventory.Host, name string) ([]byte, error) {
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if !g.MIGEnabled {
			continue
		}
		m, known := ModelOf(g)
		for _, d := range g.MIG {
			if known {
				if _, ok := m.Profile(d.Profile); ok {
					continue
				}
			} else if !partial(d.Profile) {
				// A GPU gpuctk has no data for: the driver made the
				// profile, so apply can make it again.
				continue
			}
			return nil, fmt.Errorf("GPU %d (%s): MIG device %d:%d is a %s, which gpuctk cannot make (it makes one compute instance spanning each GPU instance): no layout describes this host; apply one to replace it", g.Index, g.Name, g.Index, d.Index, d.Profile)
		}
	}
	type group struct {
		enabled bool
		devs    map[string]int
		indices []int
	}
	var groups []*group
	for i := range h.GPUs {
		g := &h.GPUs[i]
		devs := current(g)
		j := slices.IndexFunc(groups, func(x *group) bool {
			return x.enabled == g.MIGEnabled && maps.Equal(x.devs, devs)
		})
		if j < 0 {
			groups = append(groups, &group{enabled: g.MIGEnabled, devs: devs})
			j = len(groups) - 1
		}
		groups[j].indices = append(groups[j].indices, g.Index)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version: v1\nmig-configs:\n  %s:\n", quote(name))
	if len(groups) == 0 {
		b.WriteString("    - devices: all\n      mig-enabled: false\n")
	}
	for _, g := range groups {
		if len(groups) == 1 {
			b.WriteString("    - devices: all\n")
		} else {
			var idx []string
			for _, i := range g.indices {
				idx = append(idx, fmt.Sprint(i))
			}
			fmt.Fprintf(&b, "    - devices: [%s]\n", strings.Join(idx, ", "))
		}
		fmt.Fprintf(&b, "      mig-enabled: %t\n", g.enabled)
		if !g.enabled {
			continue
		}
		if len(g.devs) == 0 {
			b.WriteString("      mig-devices: {}\n")
			continue
		}
		b.WriteString("      mig-devices:\n")
		for _, p := range slices.Sorted(maps.Keys(g.devs)) {
			fmt.Fprintf(&b, "        %s: %d\n", quote(p), g.devs[p])
		}
	}
	return []byte(b.String()), nil
}

// quote writes s as a YAML double-quoted string.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// partial reports whether a MIG device's profile names a compute instance
// smaller than its GPU instance ("1c.3g.20gb"), which gpuctk never makes.
func partial(profile string) bool {
	c, _, ok := strings.Cut(profile, "c.")
	return ok && c != "" && strings.Trim(c, "0123456789") == ""
}
