package mig

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/readfile"
	"github.com/gpuctk/gpuctk/inventory"
)

// Simulator is a Device over a simulated host's profile file: Apply
// changes the profile in memory and Save rewrites the file, so that
// `gpuctk cdi generate --simulate FILE` shows the new MIG devices.
type Simulator struct {
	path    string
	profile *inventory.Profile
	// header is the file's leading comment, kept on Save.
	header []byte
	// empty are GPU instances without a compute instance, by GPU UUID:
	// the profile lists MIG devices (compute instances) only.
	empty map[string]map[int]bool
	// changed: a change was made since the file was read, so Save has
	// something to write.
	changed bool
}

// OpenSimulator reads the profile file at path.
func OpenSimulator(path string) (*Simulator, error) {
	p, err := inventory.LoadProfile(path)
	if err != nil {
		return nil, err
	}
	data, err := readfile.Limited(path, inventory.MaxProfileSize)
	if err != nil {
		return nil, err
	}
	var header []byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() && bytes.HasPrefix(sc.Bytes(), []byte("#")) {
		header = append(append(header, sc.Bytes()...), '\n')
	}
	return &Simulator{path: path, profile: p, header: header, empty: map[string]map[int]bool{}}, nil
}

// Host returns the simulated host as it is now.
func (s *Simulator) Host() (*inventory.Host, error) { return s.profile.Host() }

// Save rewrites the profile file atomically, if a change was made: an
// apply refused before any change leaves the file as it was.
func (s *Simulator) Save() error {
	if !s.changed {
		return nil
	}
	data, err := toml.Marshal(s.profile)
	if err != nil {
		return fmt.Errorf("simulated host %s: %w", s.path, err)
	}
	mode := os.FileMode(0o644)
	if st, err := os.Stat(s.path); err == nil {
		mode = st.Mode().Perm()
	}
	return atomicfile.WriteFile(s.path, append(slices.Clone(s.header), data...), mode)
}

func (s *Simulator) gpu(uuid string) (*inventory.GPU, error) {
	for i := range s.profile.GPUs {
		if s.profile.GPUs[i].UUID == uuid {
			return &s.profile.GPUs[i], nil
		}
	}
	return nil, fmt.Errorf("simulated host %s has no GPU %s", s.path, uuid)
}

// Busy reports nothing: a simulated GPU runs no processes.
func (s *Simulator) Busy(string) (string, error) { return "", nil }

// SetMIGMode sets the GPU's MIG mode.
func (s *Simulator) SetMIGMode(uuid string, enabled bool) error {
	g, err := s.gpu(uuid)
	if err != nil {
		return err
	}
	if !enabled && (len(g.MIG) > 0 || len(s.empty[uuid]) > 0) {
		// As NVML: the mode cannot change while instances exist.
		return fmt.Errorf("GPU instances exist")
	}
	if enabled {
		if _, err := s.Model(g); err != nil {
			return err
		}
	}
	g.MIGEnabled = enabled
	s.changed = true
	return nil
}

// Model returns the GPU's model data: a simulated GPU has the profiles
// gpuctk's data gives its model.
func (s *Simulator) Model(g *inventory.GPU) (*Model, error) { return DataModels{}.Model(g) }

// GPUInstances lists the GPU's GPU instance ids.
func (s *Simulator) GPUInstances(uuid string) ([]int, error) {
	g, err := s.gpu(uuid)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, d := range g.MIG {
		ids = append(ids, d.GI)
	}
	for id := range s.empty[uuid] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// DestroyGPUInstance removes the GPU instance and its MIG devices.
func (s *Simulator) DestroyGPUInstance(uuid string, gi int) error {
	g, err := s.gpu(uuid)
	if err != nil {
		return err
	}
	delete(s.empty[uuid], gi)
	g.MIG = slices.DeleteFunc(g.MIG, func(d inventory.MIGDevice) bool { return d.GI == gi })
	renumber(g)
	s.changed = true
	return nil
}

// CreateGPUInstance adds a GPU instance with NVML's id for its placement.
func (s *Simulator) CreateGPUInstance(uuid string, p *Profile, start int) (int, error) {
	g, err := s.gpu(uuid)
	if err != nil {
		return 0, err
	}
	if !g.MIGEnabled {
		return 0, fmt.Errorf("MIG mode is disabled")
	}
	m, err := s.Model(g)
	if err != nil {
		return 0, err
	}
	id := GIID(m.MemorySlices, p.MemorySlices, start)
	if ids, _ := s.GPUInstances(uuid); slices.Contains(ids, id) {
		return 0, fmt.Errorf("GPU instance %d exists", id)
	}
	if s.empty[uuid] == nil {
		s.empty[uuid] = map[int]bool{}
	}
	s.empty[uuid][id] = true
	s.changed = true
	return id, nil
}

// CreateComputeInstance adds the MIG device of GPU instance gi, numbered
// as NVML numbers MIG devices: by GPU instance id.
func (s *Simulator) CreateComputeInstance(uuid string, gi int, p *Profile) error {
	g, err := s.gpu(uuid)
	if err != nil {
		return err
	}
	if !s.empty[uuid][gi] {
		return fmt.Errorf("GPU instance %d does not exist or has a compute instance", gi)
	}
	delete(s.empty[uuid], gi)
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", uuid, gi, 0))
	g.MIG = append(g.MIG, inventory.MIGDevice{
		GI: gi, CI: 0, Profile: p.Name, MemoryMiB: p.MemoryMiB, SMCount: p.SMCount, Engines: p.Engines,
		UUID: fmt.Sprintf("MIG-%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16]),
	})
	renumber(g)
	s.changed = true
	return nil
}

// renumber gives a GPU's MIG devices their indices in GPU instance order.
func renumber(g *inventory.GPU) {
	slices.SortFunc(g.MIG, func(a, b inventory.MIGDevice) int { return cmp.Or(cmp.Compare(a.GI, b.GI), cmp.Compare(a.CI, b.CI)) })
	for i := range g.MIG {
		g.MIG[i].Index = i
	}
}
