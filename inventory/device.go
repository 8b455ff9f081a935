package inventory

import (
	"fmt"
	"regexp"
	"strconv"
)

// Device is something a container can be given: a full GPU with MIG
// disabled, or one MIG device. A GPU with MIG enabled is not a Device
// itself; its MIG devices are.
type Device struct {
	GPU *GPU `json:"gpu"`
	// MIG is nil for a full GPU.
	MIG *MIGDevice `json:"mig,omitempty"`
	// Ordinal is N in the MIG device's host-wide name mig-N, -1 for a GPU.
	Ordinal int `json:"ordinal"`
}

// profileName matches a MIG profile's name: 1g.5gb, 1c.3g.20gb, 1g.10gb+me,
// 1g.24gb-me, 1g.24gb+me.all.
var profileName = regexp.MustCompile(`^([0-9]+c\.)?[0-9]+g\.[0-9]+gb([+-][a-z.]+)?$`)

// AllGPUs is the selector of every GPU whole, in MIG mode or not.
const AllGPUs = "all-gpus"

// IsMIG reports whether the device is a MIG device.
func (d Device) IsMIG() bool { return d.MIG != nil }

// UUID returns the device's own UUID (GPU-… or MIG-…).
func (d Device) UUID() string {
	if d.MIG != nil {
		return d.MIG.UUID
	}
	return d.GPU.UUID
}

// MemoryMiB returns the device's memory.
func (d Device) MemoryMiB() uint64 {
	if d.MIG != nil {
		return d.MIG.MemoryMiB
	}
	return d.GPU.MemoryMiB
}

// Name returns the device's index-style name: "0" for GPU 0, "mig-3" for
// the fourth MIG device of the host.
func (d Device) Name() string {
	if d.MIG != nil {
		return "mig-" + strconv.Itoa(d.Ordinal)
	}
	return strconv.Itoa(d.GPU.Index)
}

// GPUMIGName returns a MIG device's "G:M" name (GPU index : MIG index),
// "" for a full GPU.
func (d Device) GPUMIGName() string {
	if d.MIG == nil {
		return ""
	}
	return strconv.Itoa(d.GPU.Index) + ":" + strconv.Itoa(d.MIG.Index)
}

// Names returns every name of the device, the index-style one first:
// "0" and "GPU-<uuid>" for a GPU; "mig-N", "G:M" and "MIG-<uuid>" for a MIG
// device.
func (d Device) Names() []string {
	if d.MIG != nil {
		return []string{d.Name(), d.GPUMIGName(), d.UUID()}
	}
	return []string{d.Name(), d.UUID()}
}

// String describes the device for messages: "GPU 0" or "MIG device mig-3 (GPU 4, 1g.5gb)".
func (d Device) String() string {
	if d.MIG != nil {
		return fmt.Sprintf("MIG device %s (GPU %d, %s)", d.Name(), d.GPU.Index, d.MIG.Profile)
	}
	return fmt.Sprintf("GPU %d", d.GPU.Index)
}

// Devices returns the host's devices in naming order: by GPU index, then
// MIG index. The host must be sorted (sources return sorted hosts).
func (h *Host) Devices() []Device {
	var out []Device
	n := 0
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if !g.MIGEnabled {
			out = append(out, Device{GPU: g, Ordinal: -1})
			continue
		}
		for j := range g.MIG {
			out = append(out, Device{GPU: g, MIG: &g.MIG[j], Ordinal: n})
			n++
		}
	}
	return out
}

// Select returns the devices a selector names: an index ("0"), a UUID, a
// MIG name ("mig-3" or "G:M"), a MIG profile ("1g.10gb": every MIG device
// of that profile), "gpus" (every GPU not in MIG mode), "mig" (every MIG
// device), "all", or "all-gpus" (every GPU whole, those in MIG mode too, as
// NVIDIA's device plugin advertises nvidia.com/gpu under its "none" MIG
// strategy: a GPU in MIG mode is then Device{GPU: g, Ordinal: -1}). A
// selector naming a GPU in MIG mode is an error that says to select its
// MIG devices instead; "gpus", "mig", "all-gpus" and a MIG profile may
// match nothing.
func (h *Host) Select(selector string) ([]Device, error) {
	devices := h.Devices()
	switch selector {
	case "all":
		return devices, nil
	case AllGPUs:
		out := make([]Device, len(h.GPUs))
		for i := range h.GPUs {
			out[i] = Device{GPU: &h.GPUs[i], Ordinal: -1}
		}
		return out, nil
	}
	var out []Device
	for _, d := range devices {
		if selector == "gpus" && d.MIG == nil || selector == "mig" && d.MIG != nil {
			out = append(out, d)
			continue
		}
		if d.MIG != nil && d.MIG.Profile == selector {
			out = append(out, d)
			continue
		}
		for _, n := range d.Names() {
			if n == selector {
				out = append(out, d)
				break
			}
		}
	}
	// A MIG profile may be missing on this node of a fleet, as a
	// resource of NVIDIA's plugin config may be.
	if len(out) > 0 || selector == "gpus" || selector == "mig" || profileName.MatchString(selector) {
		return out, nil
	}
	for _, g := range h.GPUs {
		if g.MIGEnabled && (strconv.Itoa(g.Index) == selector || g.UUID == selector) {
			return nil, fmt.Errorf("selector %q names GPU %d, which is in MIG mode: select its MIG devices (mig-N, %d:M, a profile) instead", selector, g.Index, g.Index)
		}
	}
	return nil, fmt.Errorf("selector %q matches no device on this host", selector)
}
