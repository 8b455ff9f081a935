package mig

import (
	"bytes"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpuctk/gpuctk/internal/tomlerr"
	"github.com/gpuctk/gpuctk/inventory"
)

// Profile is a GPU instance profile of a GPU model: NVML's on a real host
// (inventory/nvmlhost reads them), the model data's (models/*.toml) on a
// simulated one. Every GPU instance gpuctk creates holds one compute
// instance that spans it, which is the MIG device.
type Profile struct {
	// Name is the profile's name as nvidia-smi prints it, without "MIG ":
	// "1g.18gb", "1g.18gb+me", "1g.24gb-me".
	Name string `toml:"name"`
	// ID is NVML's GPU instance profile (NVML_GPU_INSTANCE_PROFILE_*).
	ID int `toml:"nvml-profile"`
	// ComputeSlices and MemorySlices are how many of the GPU's compute
	// and memory slices an instance takes.
	ComputeSlices int    `toml:"compute-slices"`
	MemorySlices  int    `toml:"memory-slices"`
	MemoryMiB     uint64 `toml:"memory-mib"`
	SMCount       int    `toml:"sm-count"`
	// Instances is how many instances of the profile the GPU holds at
	// most (NVML's instanceCount): 1 for a +me profile, which takes the
	// GPU's one set of media engines, though it may start anywhere.
	Instances int `toml:"instances"`
	// Starts are the memory slices an instance may start at (NVML's
	// placements); it spans MemorySlices from there.
	Starts []int `toml:"starts"`
	// Engines are an instance's copy engines, decoders, encoders, JPEG
	// decoders and optical flow accelerators (NVML's copyEngineCount,
	// decoderCount, ... of the profile): its MIG device's.
	Engines inventory.Engines `toml:"engines,inline"`
}

// Model is a GPU model that supports MIG and its GPU instance profiles.
type Model struct {
	Name string `toml:"name"`
	// Products are the names NVML reports for GPUs of this model.
	Products []string `toml:"products"`
	// PCIDeviceIDs are the model's PCI device and vendor ids in NVML's
	// pciDeviceId form (0x233510DE), as inventory.GPU.PCIDeviceID.
	PCIDeviceIDs  []uint32  `toml:"pci-device-ids"`
	ComputeSlices int       `toml:"compute-slices"`
	MemorySlices  int       `toml:"memory-slices"`
	Profiles      []Profile `toml:"profile"`
}

//go:embed models/*.toml
var modelFiles embed.FS

// models are the embedded models, loaded once: a file that does not load
// is a build that must not pass its tests (TestModels), not a runtime
// condition.
var models = mustLoadModels()

func mustLoadModels() []Model {
	ms, err := loadModels(modelFiles)
	if err != nil {
		panic(err)
	}
	return ms
}

// loadModels reads every models/*.toml of fsys, sorted by file name.
func loadModels(fsys fs.FS) ([]Model, error) {
	entries, err := fs.ReadDir(fsys, "models")
	if err != nil {
		return nil, err
	}
	var out []Model
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".toml") {
			continue
		}
		data, err := fs.ReadFile(fsys, path.Join("models", e.Name()))
		if err != nil {
			return nil, err
		}
		m, err := ParseModel(data)
		if err != nil {
			return nil, fmt.Errorf("MIG model %s: %w", e.Name(), err)
		}
		out = append(out, *m)
	}
	return out, nil
}

// ParseModel reads a model file and checks that its profiles fit its GPU:
// known fields only, slices within the GPU's, placements within its memory
// slices, unique names and NVML profiles.
func ParseModel(data []byte) (*Model, error) {
	var m Model
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, tomlerr.Line(err)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// validate checks that the model's profiles fit its GPU, as NVML's do.
func (m *Model) validate() error {
	if m.Name == "" || len(m.Products) == 0 {
		return errors.New("name and products are required")
	}
	if m.ComputeSlices < 1 || m.MemorySlices < 1 || m.MemorySlices&(m.MemorySlices-1) != 0 {
		return fmt.Errorf("compute-slices %d and memory-slices %d: want at least 1 and memory slices a power of 2", m.ComputeSlices, m.MemorySlices)
	}
	if len(m.Profiles) == 0 {
		return errors.New("no [[profile]]")
	}
	names, ids := map[string]bool{}, map[int]bool{}
	for _, p := range m.Profiles {
		where := fmt.Sprintf("profile %q", p.Name)
		switch {
		case p.Name == "" || strings.ContainsAny(p.Name, " \t\n/"):
			return fmt.Errorf("%s: a name is required, without spaces or slashes", where)
		case names[p.Name]:
			return fmt.Errorf("%s is given twice", where)
		case ids[p.ID]:
			return fmt.Errorf("%s: nvml-profile %d is another profile's too", where, p.ID)
		case p.ComputeSlices < 1 || p.ComputeSlices > m.ComputeSlices:
			return fmt.Errorf("%s: compute-slices %d: the GPU has %d", where, p.ComputeSlices, m.ComputeSlices)
		case p.MemorySlices < 1 || p.MemorySlices > m.MemorySlices:
			return fmt.Errorf("%s: memory-slices %d: the GPU has %d", where, p.MemorySlices, m.MemorySlices)
		case len(p.Starts) == 0 || p.Instances < 1 || p.Instances > len(p.Starts):
			return fmt.Errorf("%s: instances %d and %d starts: want at least one start and 1 to that many instances", where, p.Instances, len(p.Starts))
		case p.MemoryMiB == 0 || p.SMCount < 1:
			return fmt.Errorf("%s: memory-mib and sm-count are required", where)
		}
		for _, s := range p.Starts {
			if s < 0 || s+p.MemorySlices > m.MemorySlices {
				return fmt.Errorf("%s: start %d spans memory slices past the GPU's %d", where, s, m.MemorySlices)
			}
		}
		names[p.Name], ids[p.ID] = true, true
	}
	return nil
}

// Models returns the GPU models gpuctk has data for.
func Models() []Model { return slices.Clone(models) }

// ModelOf returns the model data of a GPU: by its PCI device id, else by
// the product name NVML reports.
func ModelOf(g *inventory.GPU) (*Model, bool) {
	if g.PCIDeviceID != 0 {
		for i := range models {
			if slices.Contains(models[i].PCIDeviceIDs, g.PCIDeviceID) {
				return &models[i], true
			}
		}
	}
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
// slices at this start on a GPU of gpuSlices memory slices: the slices
// form a binary tree numbered breadth first (on 8 slices, 0 the whole
// GPU, 1-2 its halves, 3-6 quarters, 7-14 single slices), so 1g instances
// at slots 0-6 of an A100 are GPU instances 7-13, and 3-6 of an A30.
func GIID(gpuSlices, memorySlices, start int) int {
	span := 1
	for span < memorySlices {
		span *= 2
	}
	return gpuSlices/span - 1 + start/span
}

// Profiles tells the MIG profiles of a host's GPUs: NVML on a real host
// (nvmlhost.MIG), gpuctk's model data on a simulated one (DataModels, a
// Simulator).
type Profiles interface {
	// Model returns the GPU's model and profiles; an error wrapping
	// ErrNeedsMIGMode when the GPU tells them only with MIG mode on.
	Model(g *inventory.GPU) (*Model, error)
}

// ErrNeedsMIGMode is what Profiles return for a GPU whose driver reports
// its MIG profiles only with MIG mode on.
var ErrNeedsMIGMode = errors.New("NVML reports the GPU's MIG profiles only with MIG mode on")

// DataModels gives each GPU the profiles of gpuctk's model data (ModelOf).
type DataModels struct{}

// Model returns the GPU's model data, or says which models there is data for.
func (DataModels) Model(g *inventory.GPU) (*Model, error) {
	if m, ok := ModelOf(g); ok {
		return m, nil
	}
	var known []string
	for _, m := range models {
		known = append(known, m.Name)
	}
	return nil, fmt.Errorf("gpuctk has no MIG model data for the %s (PCI device id 0x%08X): it has data for %s; on a real host the profiles come from NVML", g.Name, g.PCIDeviceID, strings.Join(known, ", "))
}

// NewModel makes the model of a GPU from the profiles its driver reports:
// the GPU's slices are those its profiles span, the profiles sorted as
// model files list them (by compute slices, memory slices and name).
func NewModel(name string, products []string, pciDeviceIDs []uint32, profiles []Profile) (*Model, error) {
	m := &Model{Name: name, Products: products, PCIDeviceIDs: pciDeviceIDs, Profiles: profiles}
	for _, p := range profiles {
		m.ComputeSlices = max(m.ComputeSlices, p.ComputeSlices)
		for _, s := range p.Starts {
			m.MemorySlices = max(m.MemorySlices, s+p.MemorySlices)
		}
	}
	slices.SortFunc(m.Profiles, func(a, b Profile) int {
		return cmp.Or(cmp.Compare(a.ComputeSlices, b.ComputeSlices), cmp.Compare(a.MemorySlices, b.MemorySlices), strings.Compare(a.Name, b.Name))
	})
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("MIG profiles of the %s: %w", name, err)
	}
	return m, nil
}
