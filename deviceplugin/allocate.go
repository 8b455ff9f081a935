package deviceplugin

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	pb "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/quote"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// allocate answers a kubelet Allocate for resource r: each container gets
// the CDI names kind=ID of exactly the IDs asked, and the capability
// devices caps, in every form the device-list strategies name.
func allocate(r *offer.Resource, kind string, strategies []string, caps []string, req *pb.AllocateRequest) (*pb.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range r.Devices {
		known[d.Name()] = true
	}
	resp := &pb.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		ids := creq.DevicesIds
		for _, id := range ids {
			if !known[id] {
				// The kubelet passes on what it was given: cut, the ID
				// cannot make a log line or an error of megabytes.
				return nil, fmt.Errorf("resource %s: device %s is not advertised by this plugin: the kubelet's checkpoint is stale, restart the pod", r.Name, quote.Quoted(id, quote.Bytes))
			}
		}
		if r.FailRequestsGreaterThanOne && len(ids) > 1 {
			return nil, fmt.Errorf("resource %s: %d devices requested but %s sets fail-requests-greater-than-one: ask for 1", r.Name, len(ids), r.Origin)
		}
		names := make([]string, 0, len(ids)+len(caps))
		for _, id := range append(ids[:len(ids):len(ids)], caps...) {
			names = append(names, kind+"="+id)
		}
		c := &pb.ContainerAllocateResponse{}
		for _, s := range strategies {
			switch s {
			case config.ListCDICRI:
				for _, n := range names {
					c.CdiDevices = append(c.CdiDevices, &pb.CDIDevice{Name: n})
				}
			case config.ListCDIAnnotations:
				a, err := cdiapi.UpdateAnnotations(nil, offer.AnnotationPlugin, r.Name, names)
				if err != nil {
					return nil, fmt.Errorf("resource %s: %w", r.Name, err)
				}
				c.Annotations = a
			case config.ListEnvvar:
				c.Envs = map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")}
				if len(caps) > 0 {
					// gpuctk-runtime maps the variable back onto the devices.
					list := []string{string(capability.Compute), string(capability.Utility)}
					for _, d := range caps {
						list = append(list, strings.TrimPrefix(d, capability.DevicePrefix))
					}
					c.Envs["NVIDIA_DRIVER_CAPABILITIES"] = strings.Join(list, ",")
				}
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, c)
	}
	return resp, nil
}

// preferred picks size IDs out of available for resource r: the
// must-include IDs, then, for several whole GPUs on a host that states its
// topology, the GPUs closest together (see closest); else one at a time
// the device on the physical device with the fewest (distributed) or most
// (packed) devices in use, ties to the lowest spec position.
func preferred(r *offer.Resource, policy string, available, mustInclude []string, size int) []string {
	pos := map[string]int{}
	for i, d := range r.Devices {
		pos[d.Name()] = i
	}
	free := map[string]bool{}
	for _, id := range available {
		if _, ok := pos[id]; ok {
			free[id] = true
		}
	}
	if out := closest(r, pos, free, mustInclude, size); out != nil {
		return out
	}
	// In use: every device of the resource the kubelet does not offer,
	// plus those chosen so far.
	used := map[string]int{}
	for _, d := range r.Devices {
		if !free[d.Name()] {
			used[d.UUID()]++
		}
	}
	var out []string
	take := func(id string) {
		delete(free, id)
		used[r.Devices[pos[id]].UUID()]++
		out = append(out, id)
	}
	for _, id := range mustInclude {
		if _, ok := pos[id]; ok && !slices.Contains(out, id) {
			take(id)
		}
	}
	for len(out) < size && len(free) > 0 {
		cand := make([]string, 0, len(free))
		for id := range free {
			cand = append(cand, id)
		}
		sort.Slice(cand, func(i, j int) bool {
			ui, uj := used[r.Devices[pos[cand[i]]].UUID()], used[r.Devices[pos[cand[j]]].UUID()]
			if ui != uj {
				if policy == config.Packed {
					return ui > uj
				}
				return ui < uj
			}
			return pos[cand[i]] < pos[cand[j]]
		})
		take(cand[0])
	}
	return out
}

// closest picks size whole GPUs out of free, the must-include ones kept,
// whose sum of pairwise distances (NVML topology levels) is least, so a
// multi-GPU pod gets GPUs behind one PCIe switch or on one NUMA node when
// there are such. It returns nil where topology does not apply: replicas
// or MIG devices, a request of one, or a host that gives no distances.
// It grows the set greedily from each free GPU (or from the must-include
// ones), nearest GPU first, and keeps the best set, ties to the lowest
// positions: O(n^3) for n GPUs, exact for hosts whose GPUs form nested
// groups (switch within NUMA node within system), as servers do.
func closest(r *offer.Resource, pos map[string]int, free map[string]bool, mustInclude []string, size int) []string {
	if size < 2 {
		return nil
	}
	topology := false
	for _, d := range r.Devices {
		if d.Share != nil || d.MIG != nil {
			return nil
		}
		topology = topology || len(d.GPU.Distance) > 0
	}
	if !topology {
		return nil
	}
	dist := func(a, b string) int {
		x, y := r.Devices[pos[a]].GPU, r.Devices[pos[b]].GPU
		if y.Index < len(x.Distance) {
			return x.Distance[y.Index]
		}
		return inventory.TopologySystem
	}
	var must []string
	for _, id := range mustInclude {
		if _, ok := pos[id]; ok && !slices.Contains(must, id) {
			must = append(must, id)
		}
	}
	var cand []string
	for id := range free {
		if !slices.Contains(must, id) {
			cand = append(cand, id)
		}
	}
	sort.Slice(cand, func(i, j int) bool { return pos[cand[i]] < pos[cand[j]] })
	seeds := [][]string{must}
	if len(must) == 0 {
		seeds = nil
		for _, id := range cand {
			seeds = append(seeds, []string{id})
		}
	}
	var best []string
	bestScore := 0
	for _, seed := range seeds {
		set := slices.Clone(seed)
		for len(set) < size {
			next, nextCost := "", 0
			for _, id := range cand {
				if slices.Contains(set, id) {
					continue
				}
				cost := 0
				for _, s := range set {
					cost += dist(id, s)
				}
				if next == "" || cost < nextCost {
					next, nextCost = id, cost
				}
			}
			if next == "" {
				break
			}
			set = append(set, next)
		}
		score := 0
		for i := range set {
			for j := i + 1; j < len(set); j++ {
				score += dist(set[i], set[j])
			}
		}
		if best == nil || score < bestScore || score == bestScore && lower(set, best, len(must), pos) {
			best, bestScore = set, score
		}
	}
	return best
}

// lower reports whether set's chosen GPUs (after the first keep, the
// must-include ones) sit at lower positions than other's.
func lower(set, other []string, keep int, pos map[string]int) bool {
	a, b := slices.Clone(set[keep:]), slices.Clone(other[keep:])
	by := func(x, y string) int { return pos[x] - pos[y] }
	slices.SortFunc(a, by)
	slices.SortFunc(b, by)
	return slices.CompareFunc(a, b, by) < 0
}
