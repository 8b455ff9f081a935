package mps

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
)

// Device is one shared device (a full GPU or a MIG instance) and the
// [[sharing]] entry that shares it.
type Device struct {
	// Name is the device's index-style name: "0" for a GPU, "mig-3" for
	// the host's fourth MIG instance.
	Name     string `json:"name"`
	GPUIndex int    `json:"gpuIndex"`
	// MIGIndex is the MIG device's index on its GPU, -1 for a full GPU.
	MIGIndex int    `json:"migIndex"`
	UUID     string `json:"uuid"`
	// ParentUUID is the UUID of the GPU, the device itself for a full GPU.
	ParentUUID   string `json:"parentUUID"`
	MemoryMiB    uint64 `json:"memoryMiB"`
	ComputeMajor int    `json:"computeMajor"`
	// SMCount is the MIG instance's SM count, 0 for a full GPU (the
	// inventory does not report it).
	SMCount int `json:"smCount"`
	// Entry is the 1-based position of the [[sharing]] entry.
	Entry   int            `json:"entry"`
	Sharing config.Sharing `json:"sharing"`
}

// String names the device in messages: "GPU 0 (GPU-…)" or
// "MIG device 4:1 (MIG-…)".
func (d Device) String() string {
	if d.MIGIndex < 0 {
		return fmt.Sprintf("GPU %d (%s)", d.GPUIndex, d.UUID)
	}
	return fmt.Sprintf("MIG device %d:%d (%s)", d.GPUIndex, d.MIGIndex, d.UUID)
}

// IsMPS reports whether the device is shared through MPS.
func (d Device) IsMPS() bool { return d.Sharing.Strategy == config.MPS }

// ThreadPercentage is the active thread percentage of each client: the
// configured one, or an equal share of the SMs.
func (d Device) ThreadPercentage() int {
	if p := d.Sharing.ActiveThreadPercentage; p > 0 {
		return p
	}
	return 100 / d.Sharing.Replicas
}

// PinnedMemoryMiB is the device memory limit of each client in MiB: the
// configured one, or an equal share of the device memory.
func (d Device) PinnedMemoryMiB() uint64 {
	if l := d.Sharing.PinnedMemoryLimit; l > 0 {
		return l.MiB()
	}
	return d.MemoryMiB / uint64(d.Sharing.Replicas)
}

// Resolve matches the selectors of the sharing entries against the host
// and returns every shared device, in host order (GPU index, then MIG
// index). A selector is a GPU index, a GPU or MIG UUID, mig-N (N counts
// MIG instances across the host), G:M (MIG device M of GPU G), a MIG
// profile name such as 1g.10gb, or "all" (every GPU without MIG and every
// MIG instance). A GPU with MIG enabled cannot be shared whole. A selector
// that matches nothing and a device claimed by two entries are errors that
// name the entry.
func Resolve(host *inventory.Host, sharing []config.Sharing) ([]Device, error) {
	all := devices(host)
	claimed := make([]int, len(all)) // entry number per device, 0 when free
	for i, s := range sharing {
		entry := i + 1
		for _, sel := range s.Devices {
			matched, err := match(host, all, strings.TrimSpace(sel))
			if err != nil {
				return nil, fmt.Errorf("[[sharing]] entry %d: %w", entry, err)
			}
			for _, k := range matched {
				switch claimed[k] {
				case 0:
					claimed[k] = entry
				case entry: // named twice in one entry
				default:
					return nil, fmt.Errorf("[[sharing]] entry %d: %s is already shared by entry %d: a device takes one sharing entry", entry, all[k], claimed[k])
				}
			}
		}
	}
	var out []Device
	for k, d := range all {
		if claimed[k] == 0 {
			continue
		}
		d.Entry = claimed[k]
		d.Sharing = sharing[d.Entry-1]
		out = append(out, d)
	}
	return out, nil
}

// devices lists every device that can be shared: GPUs without MIG, then
// within each GPU its MIG instances, in host order.
func devices(host *inventory.Host) []Device {
	var out []Device
	mig := 0
	for _, g := range host.GPUs {
		major := g.ComputeMajor()
		if !g.MIGEnabled {
			out = append(out, Device{
				Name: strconv.Itoa(g.Index), GPUIndex: g.Index, MIGIndex: -1, UUID: g.UUID, ParentUUID: g.UUID,
				MemoryMiB: g.MemoryMiB, ComputeMajor: major,
			})
			continue
		}
		for _, m := range g.MIG {
			out = append(out, Device{
				Name: fmt.Sprintf("mig-%d", mig), GPUIndex: g.Index, MIGIndex: m.Index, UUID: m.UUID, ParentUUID: g.UUID,
				MemoryMiB: m.MemoryMiB, ComputeMajor: major, SMCount: m.SMCount,
			})
			mig++
		}
	}
	return out
}

var errNoMatch = errors.New("matches no device")

// match returns the positions in all of the devices a selector names.
func match(host *inventory.Host, all []Device, sel string) ([]int, error) {
	var out []int
	pick := func(ok func(Device) bool) {
		for k, d := range all {
			if ok(d) {
				out = append(out, k)
			}
		}
	}
	if n, err := strconv.Atoi(sel); err == nil {
		for _, g := range host.GPUs {
			if g.Index == n && g.MIGEnabled {
				return nil, fmt.Errorf("selector %q names GPU %d, which has MIG enabled: select its MIG instances (%d:M, mig-N or a MIG profile)", sel, n, n)
			}
		}
		pick(func(d Device) bool { return d.MIGIndex < 0 && d.GPUIndex == n })
	} else if sel == "all" {
		pick(func(Device) bool { return true })
	} else if strings.HasPrefix(sel, "GPU-") || strings.HasPrefix(sel, "MIG-") {
		for _, g := range host.GPUs {
			if strings.EqualFold(g.UUID, sel) && g.MIGEnabled {
				return nil, fmt.Errorf("selector %q names GPU %d, which has MIG enabled: select its MIG instances (%d:M, mig-N or a MIG profile)", sel, g.Index, g.Index)
			}
		}
		pick(func(d Device) bool { return strings.EqualFold(d.UUID, sel) })
	} else if rest, ok := strings.CutPrefix(sel, "mig-"); ok {
		pick(func(d Device) bool { return d.MIGIndex >= 0 && d.Name == "mig-"+rest })
	} else if gs, ms, ok := strings.Cut(sel, ":"); ok {
		g, gerr := strconv.Atoi(gs)
		m, merr := strconv.Atoi(ms)
		if gerr == nil && merr == nil {
			pick(func(d Device) bool { return d.GPUIndex == g && d.MIGIndex == m })
		}
	} else {
		profiles := migProfiles(host)
		pick(func(d Device) bool { return d.MIGIndex >= 0 && profiles[d.UUID] == sel })
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("selector %q %w: use a GPU index, a UUID, mig-N, G:M, a MIG profile such as 1g.10gb, or \"all\"", sel, errNoMatch)
	}
	return out, nil
}

func migProfiles(host *inventory.Host) map[string]string {
	p := map[string]string{}
	for _, g := range host.GPUs {
		for _, m := range g.MIG {
			p[m.UUID] = m.Profile
		}
	}
	return p
}
