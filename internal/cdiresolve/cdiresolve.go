// Package cdiresolve resolves CDI spec dirs with the CDI library into a
// gpuctk-runtime cache entry (internal/cdientry). It is linked by
// gpuctk (the hidden `cdi resolve` command that gpuctk-runtime runs for
// specs gpuctk did not write) and by tests, never by gpuctk-runtime: the
// library's package init (go-yaml, regexp, fsnotify) would run at every
// container start.
package cdiresolve

import (
	"errors"
	"fmt"
	"slices"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuctk/gpuctk/internal/cdientry"
)

// Resolve loads the specs of dirs as a CDI runtime would and returns the
// specs that failed to load (one message each), every loaded spec (per
// vendor in the library's order, vendors by name) and every device that
// resolves, by name.
func Resolve(dirs []string) (errs []string, specs []cdientry.Spec, devices []cdientry.Device) {
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	for path, e := range cache.GetErrors() {
		errs = append(errs, fmt.Sprintf("%s: %v", path, errors.Join(e...)))
	}
	slices.Sort(errs)
	ids := map[*cdi.Spec]int{}
	for _, vendor := range slices.Sorted(slices.Values(cache.ListVendors())) {
		for _, s := range cache.GetVendorSpecs(vendor) {
			ids[s] = len(specs)
			specs = append(specs, cdientry.Spec{Kind: s.Kind, Edits: &s.ContainerEdits})
		}
	}
	for _, name := range cache.ListDevices() {
		d := cache.GetDevice(name)
		if d == nil {
			continue
		}
		id, ok := ids[d.GetSpec()]
		if !ok {
			continue // not listed by vendor: cannot happen
		}
		devices = append(devices, cdientry.Device{Name: name, Spec: id, Edits: &d.ContainerEdits})
	}
	return errs, specs, devices
}

// Entry is the gpuctk-runtime cache entry of dirs as the library resolves
// them: what `gpuctk cdi resolve` prints.
func Entry(dirs []string) ([]byte, error) {
	errs, specs, devices := Resolve(dirs)
	return cdientry.Encode(errs, specs, devices)
}
