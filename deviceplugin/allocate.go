package deviceplugin

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	pb "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/offer"
)

// annotationPlugin is the plugin part of the cdi.k8s.io/ annotation keys;
// the resource makes each key unique in a container.
const annotationPlugin = "gpuctk"

// allocate answers a kubelet Allocate for resource r: each container gets
// the CDI names kind=ID of exactly the IDs asked, in every form the
// device-list strategies name.
func allocate(r *offer.Resource, kind string, strategies []string, req *pb.AllocateRequest) (*pb.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range r.Devices {
		known[d.Name()] = true
	}
	resp := &pb.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		ids := creq.DevicesIds
		for _, id := range ids {
			if !known[id] {
				return nil, fmt.Errorf("resource %s: device %q is not advertised by this plugin: the kubelet's checkpoint is stale, restart the pod", r.Name, id)
			}
		}
		if r.FailRequestsGreaterThanOne && len(ids) > 1 {
			return nil, fmt.Errorf("resource %s: %d devices requested but %s sets fail-requests-greater-than-one: ask for 1", r.Name, len(ids), r.Origin)
		}
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = kind + "=" + id
		}
		c := &pb.ContainerAllocateResponse{}
		for _, s := range strategies {
			switch s {
			case config.ListCDICRI:
				for _, n := range names {
					c.CdiDevices = append(c.CdiDevices, &pb.CDIDevice{Name: n})
				}
			case config.ListCDIAnnotations:
				a, err := cdiapi.UpdateAnnotations(nil, annotationPlugin, r.Name, names)
				if err != nil {
					return nil, fmt.Errorf("resource %s: %w", r.Name, err)
				}
				c.Annotations = a
			case config.ListEnvvar:
				c.Envs = map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")}
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, c)
	}
	return resp, nil
}

// preferred picks size IDs out of available for resource r: the
// must-include IDs, then one at a time the device on the physical device
// with the fewest (distributed) or most (packed) devices in use, ties to
// the lowest spec position.
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
