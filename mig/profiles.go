package mig

import (
	"slices"
	"strings"

	"github.com/gpuctk/gpuctk/inventory"
)

// Profile is a GPU instance profile of a GPU model, as NVIDIA's MIG user
// guide documents it. Every GPU instance gpuctk creates holds one compute
// instance that spans it, which is the MIG device.
type Profile struct {
	Name string
	// ID is NVML's GPU instance profile (NVML_GPU_INSTANCE_PROFILE_*).
	ID int
	// ComputeSlices and MemorySlices are how many of the GPU's seven
	// compute and eight memory slices an instance takes.
	ComputeSlices int
	MemorySlices  int
	MemoryMiB     uint64
	SMCount       int
	// Starts are the memory slices an instance may start at (NVML's
	// placements); it spans MemorySlices from there.
	Starts []int
	// Engines are an instance's copy engines, decoders, encoders, JPEG
	// decoders and optical flow accelerators (NVML's copyEngineCount,
	// decoderCount, ... of the profile): its MIG device's.
	Engines inventory.Engines
}

// Model is a GPU model that supports MIG.
type Model struct {
	Name string
	// Products are the names NVML reports for GPUs of this model.
	Products      []string
	ComputeSlices int
	MemorySlices  int
	Profiles      []Profile
}

// NVML's GPU instance profile ids.
const (
	profile1Slice     = 0
	profile2Slice     = 1
	profile3Slice     = 2
	profile4Slice     = 3
	profile7Slice     = 4
	profile1SliceRev2 = 9
)

// engines lists a profile's engines in the order nvidia-smi mig -lgip
// shows them: copy engines (CE), decoders (DEC), encoders (ENC), JPEG
// decoders and optical flow accelerators (OFA).
func engines(copyEngines, decoders, encoders, jpeg, ofa int) inventory.Engines {
	return inventory.Engines{Copy: copyEngines, Decoder: decoders, Encoder: encoders, JPEG: jpeg, OFA: ofa}
}

// models are the GPU models gpuctk can partition. Memory sizes and SM
// counts are those NVML reports for each profile; the placements are the
// same on all three: a 1-slice profile anywhere but the last memory slice
// (which only the full 7g profile reaches), a 2-slice one on even slices,
// 3g and 4g on halves, 7g on the whole GPU. The engines are those of the
// MIG user guide's profile tables and nvidia-smi mig -lgip: an A100 has no
// encoder, and its JPEG decoder and optical flow accelerator belong to the
// 7g profile alone (and to the +me profiles gpuctk does not create); every
// H100 profile has a JPEG decoder per decoder, and its 7g one 8 copy
// engines.
var models = []Model{
	{
		Name:          "A100-40GB",
		Products:      []string{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"},
		ComputeSlices: 7, MemorySlices: 8,
		Profiles: []Profile{
			{"1g.5gb", profile1Slice, 1, 1, 4864, 14, []int{0, 1, 2, 3, 4, 5, 6}, engines(1, 0, 0, 0, 0)},
			{"1g.10gb", profile1SliceRev2, 1, 2, 9856, 14, []int{0, 2, 4, 6}, engines(1, 1, 0, 0, 0)},
			{"2g.10gb", profile2Slice, 2, 2, 9856, 28, []int{0, 2, 4}, engines(2, 1, 0, 0, 0)},
			{"3g.20gb", profile3Slice, 3, 4, 19968, 42, []int{0, 4}, engines(3, 2, 0, 0, 0)},
			{"4g.20gb", profile4Slice, 4, 4, 19968, 56, []int{0}, engines(4, 2, 0, 0, 0)},
			{"7g.40gb", profile7Slice, 7, 8, 40192, 98, []int{0}, engines(7, 5, 0, 1, 1)},
		},
	},
	{
		Name:          "A100-80GB",
		Products:      []string{"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"},
		ComputeSlices: 7, MemorySlices: 8,
		Profiles: []Profile{
			{"1g.10gb", profile1Slice, 1, 1, 9728, 14, []int{0, 1, 2, 3, 4, 5, 6}, engines(1, 0, 0, 0, 0)},
			{"1g.20gb", profile1SliceRev2, 1, 2, 19968, 14, []int{0, 2, 4, 6}, engines(1, 1, 0, 0, 0)},
			{"2g.20gb", profile2Slice, 2, 2, 19968, 28, []int{0, 2, 4}, engines(2, 1, 0, 0, 0)},
			{"3g.40gb", profile3Slice, 3, 4, 40192, 42, []int{0, 4}, engines(3, 2, 0, 0, 0)},
			{"4g.40gb", profile4Slice, 4, 4, 40192, 56, []int{0}, engines(4, 2, 0, 0, 0)},
			{"7g.80gb", profile7Slice, 7, 8, 81152, 98, []int{0}, engines(7, 5, 0, 1, 1)},
		},
	},
	{
		Name:          "H100-80GB",
		Products:      []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"},
		ComputeSlices: 7, MemorySlices: 8,
		Profiles: []Profile{
			{"1g.10gb", profile1Slice, 1, 1, 9856, 16, []int{0, 1, 2, 3, 4, 5, 6}, engines(1, 1, 0, 1, 0)},
			{"1g.20gb", profile1SliceRev2, 1, 2, 20096, 26, []int{0, 2, 4, 6}, engines(1, 1, 0, 1, 0)},
			{"2g.20gb", profile2Slice, 2, 2, 20096, 32, []int{0, 2, 4}, engines(2, 2, 0, 2, 0)},
			{"3g.40gb", profile3Slice, 3, 4, 40448, 60, []int{0, 4}, engines(3, 3, 0, 3, 0)},
			{"4g.40gb", profile4Slice, 4, 4, 40448, 64, []int{0}, engines(4, 4, 0, 4, 0)},
			{"7g.80gb", profile7Slice, 7, 8, 81152, 132, []int{0}, engines(8, 7, 0, 7, 1)},
		},
	},
}

// Models returns the GPU models gpuctk can partition.
func Models() []Model { return slices.Clone(models) }

// ModelOf returns the model of a GPU, by the product name NVML reports.
func ModelOf(g *inventory.GPU) (*Model, bool) {
	for i := range models {
		if slices.Contains(models[i].Products, g.Name) {
			return &models[i], true
		}
	}
	return nil, false
}

// Profile returns the model's profile called name.
func (m *Model) Profile(name string) (*Profile, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].Name == name {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileNames lists the model's profile names, smallest first.
func (m *Model) ProfileNames() string {
	var n []string
	for _, p := range m.Profiles {
		n = append(n, p.Name)
	}
	return strings.Join(n, ", ")
}

// GIID is the GPU instance id NVML gives an instance of this many memory
// slices at this start: the GPU's slices form a binary tree numbered
// breadth first (0 the whole GPU, 1-2 its halves, 3-6 quarters, 7-14
// single slices), so 1g instances at slots 0-6 are GPU instances 7-13.
func GIID(memorySlices, start int) int {
	span := 1
	for span < memorySlices {
		span *= 2
	}
	return 8/span - 1 + start/span
}
