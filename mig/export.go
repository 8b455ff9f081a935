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
// changes nothing.
func Export(h *inventory.Host, name string) []byte {
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
	return []byte(b.String())
}

// quote writes s as a YAML double-quoted string.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
