// Package cdiresolve resolves CDI spec dirs with the CDI library into the
// specs and devices of a gpuctk-runtime cache entry. It is linked by
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
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Spec is one spec the library loaded: its kind and common edits.
type Spec struct {
	Kind  string
	Edits *cdispec.ContainerEdits
}

// Device is one device the library resolved: its qualified name, the
// index of its spec in the specs returned with it, its edits.
type Device struct {
	Name  string
	Spec  int
	Edits *cdispec.ContainerEdits
}

// Resolve loads the specs of dirs as a CDI runtime would and returns the
// specs that failed to load (one message each), every loaded spec (per
// vendor in the library's order, vendors by name) and every device that
// resolves, by name.
func Resolve(dirs []string) (errs []string, specs []Spec, devices []Device) {
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	for path, e := range cache.GetErrors() {
		errs = append(errs, fmt.Sprintf("%s: %v", path, errors.Join(e...)))
	}
	slices.Sort(errs)
	ids := map[*cdi.Spec]int{}
	for _, vendor := range slices.Sorted(slices.Values(cache.ListVendors())) {
		for _, s := range cache.GetVendorSpecs(vendor) {
			ids[s] = len(specs)
			specs = append(specs, Spec{Kind: s.Kind, Edits: &s.ContainerEdits})
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
		devices = append(devices, Device{Name: name, Spec: id, Edits: &d.ContainerEdits})
	}
	return errs, specs, devices
}
