package mps

import (
	"fmt"

	"github.com/gpuctk/gpuctk/config"
)

// Device is an MPS-shared device (a full GPU or a MIG instance): what the
// daemon, the validation and the replica edits need to know of it. It is
// recorded as JSON in the state root while its daemon runs, so stop and
// status find it whatever the configuration says later.
type Device struct {
	// Name is the device's index-style name: "0" for a GPU, "mig-3" for
	// the host's fourth MIG device.
	Name     string `json:"name"`
	GPUIndex int    `json:"gpuIndex"`
	// MIGIndex is the MIG device's index on its GPU, -1 for a full GPU.
	MIGIndex int    `json:"migIndex"`
	UUID     string `json:"uuid"`
	// ParentUUID is the UUID of the GPU, the device itself for a full GPU.
	ParentUUID   string `json:"parentUUID"`
	MemoryMiB    uint64 `json:"memoryMiB"`
	ComputeMajor int    `json:"computeMajor"`
	// SMCount is a MIG device's SM count, 0 for a full GPU (the inventory
	// does not report it).
	SMCount int `json:"smCount"`
	// Entry is the 1-based position of the [[sharing]] entry.
	Entry   int            `json:"entry"`
	Sharing config.Sharing `json:"sharing"`
	// ThreadPercentage and PinnedMemoryMiB are each client's limits: the
	// configured ones, or an equal share of the SMs and of the memory.
	ThreadPercentage int    `json:"threadPercentage"`
	PinnedMemoryMiB  uint64 `json:"pinnedMemoryMiB"`
}

// NewDevice describes a shared device as package mps needs it.
func NewDevice(s config.Shared) Device {
	d := Device{
		Name: s.Name(), GPUIndex: s.GPU.Index, MIGIndex: -1, UUID: s.UUID(), ParentUUID: s.GPU.UUID,
		MemoryMiB: s.MemoryMiB(), ComputeMajor: s.GPU.ComputeMajor(),
		Entry: s.Entry, Sharing: *s.Sharing,
		ThreadPercentage: s.ThreadPercentage(), PinnedMemoryMiB: s.MemoryLimitMiB(),
	}
	if s.MIG != nil {
		d.MIGIndex, d.SMCount = s.MIG.Index, s.MIG.SMCount
	}
	return d
}

// Devices returns the MPS-shared devices among shared, in its order.
func Devices(shared []config.Shared) []Device {
	var out []Device
	for _, s := range shared {
		if s.Strategy == config.MPS {
			out = append(out, NewDevice(s))
		}
	}
	return out
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
