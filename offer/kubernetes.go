package offer

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/plural"
)

// GPUResource is the Kubernetes resource of whole GPUs.
const GPUResource = "nvidia.com/gpu"

// AnnotationPlugin is the plugin part of the device plugin's cdi.k8s.io/
// annotation keys (device-list-strategy cdi-annotations); the resource
// makes each key unique in a container.
const AnnotationPlugin = "gpuctk"

// Resource is one Kubernetes extended resource a node advertises: its
// kubelet device IDs are the spec's index-style names of Devices.
type Resource struct {
	Name string
	// Devices are the resource's CDI entries in the spec's order.
	Devices []Device
	// Shared is set when the devices are replicas of shared devices
	// (some of them, when the resource mixes them with whole devices).
	Shared bool
	// FailRequestsGreaterThanOne refuses a container asking for more
	// than one device of the resource.
	FailRequestsGreaterThanOne bool
	// Origin is the [[sharing]] entry that set the rules of a shared
	// resource (its first entry when several share the resource).
	Origin Origin
}

// resources maps what the host offers to Kubernetes resources under the
// [kubernetes] settings, sorted by name (Set.Resources). Entries sharing a
// resource with different strategies or fail settings, a node that the
// single MIG strategy cannot describe and a resource name no annotation
// key can hold are errors naming the devices and entries. A resource
// mixing whole devices and replicas or pooling devices of several kinds,
// and a GPU in MIG mode advertised whole under "none", are warnings.
func resources(set *Set, k config.Kubernetes) ([]Resource, []string, []string, error) {
	if k.MIGStrategy == config.MIGSingle {
		if err := checkSingle(set); err != nil {
			return nil, nil, nil, err
		}
	}
	byName := map[string]*Resource{}
	strategy := map[string]string{} // resource -> strategy of its first entry
	var errs []error
	var warnings, notes []string
	said := map[string]bool{} // each error or warning once, not once per replica
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
			r = &Resource{Name: name}
			byName[name] = r
		}
		if w := r.mixes(d); w != "" && !said["mixes "+name] {
			said["mixes "+name] = true // once per resource
			warnings = append(warnings, w)
		}
		if d.Share != nil && !r.Shared {
			r.Shared = true
			r.FailRequestsGreaterThanOne = d.Share.FailRequestsGreaterThanOne
			r.Origin = d.Share.Origin
			strategy[name] = d.Share.Strategy
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
		return nil, nil, nil, err
	}
	out := make([]Resource, 0, len(byName))
	for _, r := range byName {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if slices.Contains(k.DeviceListStrategy, config.ListCDIAnnotations) {
		for i := range out {
			if _, err := cdiapi.AnnotationKey(AnnotationPlugin, out[i].Name); err != nil {
				errs = append(errs, fmt.Errorf("%s: device-list-strategy cdi-annotations cannot name it in an annotation key (%w): choose a shorter resource name, or another strategy", &out[i], err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, nil, nil, err
		}
	}
	for i := range out {
		if w := out[i].pooled(); w != "" {
			warnings = append(warnings, w)
		}
	}
	if k.MIGStrategy == config.MIGNone {
		// As NVIDIA's plugin does, a GPU in MIG mode goes out whole: its
		// MIG devices are of no use to such a pod. Say so.
		var mig []string
		for _, g := range set.Host.GPUs {
			if g.MIGEnabled {
				mig = append(mig, strconv.Itoa(g.Index))
			}
		}
		if len(mig) > 0 {
			notes = append(notes, fmt.Sprintf(`GPU %s in MIG mode: advertised whole as nvidia.com/gpu under [kubernetes] mig-strategy "none"; set "mixed" or "single" to advertise MIG devices`,
				strings.Join(mig, ", ")))
		}
	}
	return out, warnings, notes, nil
}

// kindOf names what a pod asking for a device gets: the product, and the
// MIG profile of a MIG device.
func kindOf(d Device) string {
	if d.IsMIG() {
		return d.GPU.Name + " MIG " + d.MIG.Profile
	}
	return d.GPU.Name
}

// pooled says when r pools devices of several kinds (products, MIG
// profiles): a pod asking for it cannot say which it gets, which defeats
// the mixed MIG strategy. "" when all are of one kind.
func (r *Resource) pooled() string {
	var kinds []string
	count, seen := map[string]int{}, map[string]bool{}
	for _, d := range r.Devices {
		if seen[d.UUID()] {
			continue // a replica of a device counted
		}
		seen[d.UUID()] = true
		k := kindOf(d)
		if count[k] == 0 {
			kinds = append(kinds, k)
		}
		count[k]++
	}
	if len(kinds) < 2 {
		return ""
	}
	list := make([]string, len(kinds))
	for i, k := range kinds {
		list[i] = fmt.Sprintf("%s (%d)", k, count[k])
	}
	return fmt.Sprintf("%s pools devices of %d kinds: %s: a pod cannot choose which it gets; give each kind its own resource (a \"resource\" per [[sharing]] entry)",
		r, len(kinds), strings.Join(list, ", "))
}

// String names a resource in messages, with the [[sharing]] entry that
// made it.
func (r *Resource) String() string {
	if r.Shared {
		return fmt.Sprintf("resource %s (%s)", r.Name, r.Origin)
	}
	return "resource " + r.Name
}

// mixes says when d, a device offered whole, joins replicas in r or the
// other way round: a pod asking for r may get either, as NVIDIA's plugin
// has it for a devices list that leaves other devices of the resource
// whole. "" when it does not.
func (r *Resource) mixes(d Device) string {
	if len(r.Devices) == 0 || (d.Share != nil) == (r.Devices[0].Share != nil) {
		return ""
	}
	whole, replica := r.Devices[0], d
	if d.Share == nil {
		whole, replica = d, r.Devices[0]
	}
	return fmt.Sprintf("resource %s mixes the whole %s and replicas of %s (%s): a pod asking for it may get either, as with NVIDIA's plugin; set a \"resource\" in that entry or [kubernetes] rename-shared = true to keep them apart",
		r.Name, whole.Device, replica.Device, replica.Share.Origin)
}

// check reports whether d, a replica, may join r; strategy is r's
// sharing strategy.
func (r *Resource) check(d Device, strategy string) error {
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

// Summary describes resources one line each, as `gpuctk config check`
// prints them: "nvidia.com/gpu: 4 devices", "nvidia.com/gpu.shared: 16
// replicas of 4 devices (time-slicing, fail-requests-greater-than-one)".
func Summary(rs []Resource) string {
	var b strings.Builder
	for i := range rs {
		r := &rs[i]
		devs, replicas, strategy := map[string]bool{}, 0, ""
		for _, d := range r.Devices {
			devs[d.UUID()] = true
			if d.Share != nil {
				replicas++
				strategy = d.Share.Strategy
			}
		}
		fmt.Fprintf(&b, "%s: ", r.Name)
		switch {
		case replicas == 0:
			b.WriteString(plural.Count(len(devs), "device"))
		case replicas == len(r.Devices):
			fmt.Fprintf(&b, "%s of %s (%s", plural.Count(replicas, "replica"), plural.Count(len(devs), "device"), strategy)
		default:
			fmt.Fprintf(&b, "%s and %s of %s (%s", plural.Count(replicas, "replica"), plural.Count(len(r.Devices)-replicas, "whole device"), plural.Count(len(devs), "device"), strategy)
		}
		if replicas > 0 {
			if r.FailRequestsGreaterThanOne {
				b.WriteString(", fail-requests-greater-than-one")
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
	}
	return b.String()
}
