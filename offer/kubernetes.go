package offer

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/gpuctk/gpuctk/config"
)

// GPUResource is the Kubernetes resource of whole GPUs.
const GPUResource = "nvidia.com/gpu"

// Resource is one Kubernetes extended resource a node advertises: its
// kubelet device IDs are the spec's index-style names of Devices.
type Resource struct {
	Name string
	// Devices are the resource's CDI entries in the spec's order.
	Devices []Device
	// Shared is set when the devices are replicas of shared devices.
	Shared bool
	// FailRequestsGreaterThanOne refuses a container asking for more
	// than one device of the resource.
	FailRequestsGreaterThanOne bool
	// Origin is the [[sharing]] entry that set the rules of a shared
	// resource (its first entry when several share the resource).
	Origin Origin
}

// Resources maps what the host offers to Kubernetes resources under the
// [kubernetes] settings, sorted by name. A resource mixing whole devices
// and replicas, entries sharing a resource with different strategies or
// fail settings, and a node that the single MIG strategy cannot describe
// are errors naming the devices and entries.
func Resources(set *Set, k config.Kubernetes) ([]Resource, error) {
	if k.MIGStrategy == config.MIGSingle {
		if err := checkSingle(set); err != nil {
			return nil, err
		}
	}
	byName := map[string]*Resource{}
	strategy := map[string]string{} // resource -> strategy of its first entry
	var errs []error
	said := map[string]bool{} // each error once, not once per replica
	for _, d := range set.Devices {
		base, ok := baseResource(d, k.MIGStrategy)
		if !ok {
			continue
		}
		name := base
		if d.Share != nil {
			switch {
			case d.Share.Resource != "":
				name = d.Share.Resource
			case k.RenameShared:
				name = base + ".shared"
			}
		}
		r := byName[name]
		if r == nil {
			r = &Resource{Name: name, Shared: d.Share != nil}
			if d.Share != nil {
				r.FailRequestsGreaterThanOne = d.Share.FailRequestsGreaterThanOne
				r.Origin = d.Share.Origin
				strategy[name] = d.Share.Strategy
			}
			byName[name] = r
		}
		if err := r.check(d, strategy[name]); err != nil {
			if !said[err.Error()] {
				said[err.Error()] = true
				errs = append(errs, err)
			}
			continue
		}
		r.Devices = append(r.Devices, d)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]Resource, 0, len(byName))
	for _, r := range byName {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// check reports whether d may join r; strategy is r's sharing strategy.
func (r *Resource) check(d Device, strategy string) error {
	if (d.Share != nil) != r.Shared {
		whole, replica := r.Devices[0], d
		if d.Share == nil {
			whole, replica = d, r.Devices[0]
		}
		return fmt.Errorf("resource %s would mix the whole %s and replicas of %s (%s): set a \"resource\" in that entry or [kubernetes] rename-shared = true",
			r.Name, whole.Device, replica.Device, replica.Share.Origin)
	}
	if d.Share == nil || d.Share.Origin == r.Origin {
		return nil
	}
	if d.Share.Strategy != strategy {
		return fmt.Errorf("resource %s: %s uses strategy %q but %s uses %q: entries sharing a resource must use one strategy",
			r.Name, d.Share.Origin, d.Share.Strategy, r.Origin, strategy)
	}
	if d.Share.FailRequestsGreaterThanOne != r.FailRequestsGreaterThanOne {
		return fmt.Errorf("resource %s: %s sets fail-requests-greater-than-one = %t but %s sets %t: entries sharing a resource must agree",
			r.Name, d.Share.Origin, d.Share.FailRequestsGreaterThanOne, r.Origin, r.FailRequestsGreaterThanOne)
	}
	return nil
}

// baseResource is the resource of a device offered whole; false when the
// MIG strategy does not advertise it. A GPU in MIG mode is advertised
// whole under "none" only (as NVIDIA's plugin does), its MIG devices
// under "single" and "mixed" only.
func baseResource(d Device, migStrategy string) (string, bool) {
	if !d.IsMIG() {
		return GPUResource, !d.GPU.MIGEnabled || migStrategy == config.MIGNone
	}
	switch migStrategy {
	case config.MIGSingle:
		return GPUResource, true
	case config.MIGMixed:
		return "nvidia.com/mig-" + strings.ReplaceAll(d.MIG.Profile, "+", "."), true
	}
	return "", false
}

// checkSingle enforces the single MIG strategy: when any GPU is in MIG
// mode, all are, with one MIG profile.
func checkSingle(set *Set) error {
	var mig, whole []string
	profiles := map[string][]string{}
	for _, g := range set.Host.GPUs {
		if !g.MIGEnabled {
			whole = append(whole, fmt.Sprintf("GPU %d", g.Index))
			continue
		}
		mig = append(mig, fmt.Sprintf("GPU %d", g.Index))
		for _, m := range g.MIG {
			profiles[m.Profile] = append(profiles[m.Profile], fmt.Sprintf("%d:%d", g.Index, m.Index))
		}
	}
	if len(mig) == 0 {
		return nil
	}
	if len(whole) > 0 {
		return fmt.Errorf(`[kubernetes] mig-strategy "single": %s in MIG mode but %s not: use "mixed", or put every GPU in MIG mode`,
			strings.Join(mig, ", "), strings.Join(whole, ", "))
	}
	if len(profiles) > 1 {
		var list []string
		for p, devs := range profiles {
			list = append(list, p+" ("+strings.Join(devs, ", ")+")")
		}
		sort.Strings(list)
		return fmt.Errorf(`[kubernetes] mig-strategy "single": MIG devices of several profiles: %s: use "mixed", or one profile on every GPU`,
			strings.Join(list, "; "))
	}
	return nil
}
