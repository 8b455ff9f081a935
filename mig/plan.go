package mig

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpuctk/gpuctk/internal/plural"
	"github.com/gpuctk/gpuctk/inventory"
)

// Instance is a GPU instance holding one compute instance that spans it.
type Instance struct {
	Profile string
	// GI is the GPU instance id: an existing one's, or the one NVML gives
	// an instance created at Start.
	GI int
	// Start is the first memory slice of a planned instance (-1 for an
	// existing one, whose placement the plan does not need).
	Start int
	// Slices is a planned instance's number of memory slices.
	Slices int
}

// GPUPlan is what changes on one GPU. A GPU whose layout differs is
// rebuilt whole (every GPU instance destroyed, the new ones created), as
// mig-parted does: MIG devices are handed out by profile, not by
// placement, and a rebuild also clears what a failed apply left behind.
type GPUPlan struct {
	Index int
	UUID  string
	Name  string
	// SetMIG is the MIG mode to set; nil leaves it as it is.
	SetMIG *bool
	// Destroy are the GPU instances to destroy (with their compute
	// instances); Create the ones to create, at their placements.
	Destroy []Instance
	Create  []Instance
	// Have and Want describe the layout now and the one asked for.
	Have, Want string
	// Note says where the profiles came from when not from the GPU
	// itself (its driver tells them only in MIG mode); empty otherwise.
	Note string
	// model is the GPU's model, nil when MIG is to be disabled or its
	// profiles are not known before MIG mode is on.
	model *Model
	// replan: the instances are placed again from the device's own
	// profiles once MIG mode is on; gpu and want are what that takes.
	replan bool
	gpu    *inventory.GPU
	want   map[string]int
}

// Plan is the changes that turn a host's layout into a config's.
type Plan struct {
	Layout string
	// GPUs are the GPUs that change, by index.
	GPUs []GPUPlan
	// Selected counts the GPUs an entry of the layout selects, changed or
	// not: 0 for a layout whose device-filter names other models, such as
	// NVIDIA's all-1g.35gb (H200, GB300) on an A100 host, which changes
	// nothing.
	Selected int
}

// Empty reports whether the host already has the layout.
func (p *Plan) Empty() bool { return len(p.GPUs) == 0 }

// PlanOption changes how Compute plans.
type PlanOption func(*planner)

type planner struct {
	profiles Profiles
}

// WithProfiles makes Compute take the GPUs' MIG profiles from p (NVML's
// on a real host) instead of gpuctk's model data.
func WithProfiles(p Profiles) PlanOption {
	return func(pl *planner) { pl.profiles = p }
}

// Compute plans the changes that give host h the layout called name in
// cfg. It refuses, naming the GPU and the profile, a layout that a GPU it
// selects cannot have; nothing is planned for GPUs no entry selects.
func Compute(h *inventory.Host, cfg *Config, name string, opts ...PlanOption) (*Plan, error) {
	pl := planner{profiles: DataModels{}}
	for _, o := range opts {
		o(&pl)
	}
	entries, err := cfg.Layout(name)
	if err != nil {
		return nil, err
	}
	where := fmt.Sprintf("MIG config %s, config %q", cfg.Source, name)
	for i, e := range entries {
		for _, d := range e.Devices {
			if !slices.ContainsFunc(h.GPUs, func(g inventory.GPU) bool { return g.Index == d }) {
				return nil, fmt.Errorf("%s entry %d: GPU %d does not exist on this host, which has %s", where, i+1, d, plural.Count(len(h.GPUs), "GPU"))
			}
		}
	}
	p := &Plan{Layout: name}
	for gi := range h.GPUs {
		g := &h.GPUs[gi]
		entry := -1
		for i := range entries {
			if !entries[i].matches(g) {
				continue
			}
			if entry >= 0 {
				return nil, fmt.Errorf("%s: GPU %d (%s) is selected by entries %d and %d: make the entries' devices or device-filter disjoint", where, g.Index, g.Name, entry+1, i+1)
			}
			entry = i
		}
		if entry < 0 {
			continue
		}
		p.Selected++
		gp, err := pl.planGPU(g, &entries[entry])
		if err != nil {
			return nil, fmt.Errorf("%s entry %d: GPU %d (%s): %w", where, entry+1, g.Index, g.Name, err)
		}
		if gp != nil {
			p.GPUs = append(p.GPUs, *gp)
		}
	}
	return p, nil
}

// planGPU returns the changes for one GPU, nil when there are none.
func (pl *planner) planGPU(g *inventory.GPU, e *Entry) (*GPUPlan, error) {
	have := describe(g.MIGEnabled, current(g))
	want := describe(e.MIGEnabled, e.MIGDevices)
	gp := &GPUPlan{Index: g.Index, UUID: g.UUID, Name: g.Name, Have: have, Want: want}
	if !e.MIGEnabled {
		if !g.MIGEnabled {
			return nil, nil
		}
		gp.Destroy = existing(g)
		gp.SetMIG = new(false)
		return gp, nil
	}
	m, err := pl.profiles.Model(g)
	if errors.Is(err, ErrNeedsMIGMode) && !g.MIGEnabled {
		// Plan from the model data where there is some, and place the
		// instances again from the GPU's own profiles once MIG mode is
		// on; without data, only the mode can be planned now.
		gp.replan, gp.gpu, gp.want = true, g, e.MIGDevices
		if data, ok := ModelOf(g); ok {
			m = data
			gp.Note = fmt.Sprintf("the driver reports MIG profiles only with MIG mode on: planned from gpuctk's %s model data; the instances are placed from the driver's profiles once MIG mode is on", data.Name)
		} else {
			gp.Note = "the driver reports MIG profiles only with MIG mode on and gpuctk has no model data for this GPU: MIG mode is enabled first, then the instances are planned from the driver's profiles"
			gp.SetMIG = new(true)
			return gp, nil
		}
	} else if err != nil {
		return nil, err
	}
	gp.model = m
	create, err := Place(m, e.MIGDevices)
	if err != nil {
		return nil, err
	}
	if g.MIGEnabled && have == want && len(existing(g)) == len(g.MIG) {
		return nil, nil
	}
	if !g.MIGEnabled {
		gp.SetMIG = new(true)
	}
	gp.Destroy = existing(g)
	gp.Create = create
	return gp, nil
}

// current counts a GPU's MIG devices by profile.
func current(g *inventory.GPU) map[string]int {
	c := map[string]int{}
	for _, d := range g.MIG {
		c[d.Profile]++
	}
	return c
}

// existing lists a GPU's GPU instances, by id.
func existing(g *inventory.GPU) []Instance {
	var out []Instance
	seen := map[int]bool{}
	for _, d := range g.MIG {
		if !seen[d.GI] {
			seen[d.GI] = true
			out = append(out, Instance{Profile: d.Profile, GI: d.GI, Start: -1})
		}
	}
	slices.SortFunc(out, func(a, b Instance) int { return cmp.Compare(a.GI, b.GI) })
	return out
}

// describe writes a layout as "MIG disabled" or "MIG enabled: 2 x
// 1g.5gb, 1 x 3g.20gb".
func describe(enabled bool, devs map[string]int) string {
	if !enabled {
		return "MIG disabled"
	}
	if len(devs) == 0 {
		return "MIG enabled, no MIG devices"
	}
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(devs)) {
		parts = append(parts, fmt.Sprintf("%d x %s", devs[p], p))
	}
	return "MIG enabled: " + strings.Join(parts, ", ")
}

// Place finds placements for the given counts of m's profiles: larger
// instances first, each at the lowest free start its profile allows,
// backtracking when the rest do not fit (3g.20gb + 2 x 2g.10gb on an A100
// fits only with the 3g instance on the upper half). It refuses a profile
// the model lacks, more slices than the GPU has, and placements that
// collide.
func Place(m *Model, want map[string]int) ([]Instance, error) {
	var todo []*Profile
	compute, memory := 0, 0
	for _, name := range slices.Sorted(maps.Keys(want)) {
		p, ok := m.Profile(name)
		if !ok {
			return nil, fmt.Errorf("profile %s is not one of the %s's: %s", name, m.Name, m.ProfileNames())
		}
		// Bound a count before using it: a config may ask for billions.
		if n := want[name]; n > m.ComputeSlices {
			return nil, fmt.Errorf("%d x %s needs more than the %d compute slices the %s has", n, name, m.ComputeSlices, m.Name)
		}

		for range want[name] {
			todo = append(todo, p)
		}
		compute += want[name] * p.ComputeSlices
		memory += want[name] * p.MemorySlices
	}
	if compute > m.ComputeSlices {
		return nil, fmt.Errorf("%s needs %d compute slices; the %s has %d", describe(true, want), compute, m.Name, m.ComputeSlices)
	}
	if memory > m.MemorySlices {
		return nil, fmt.Errorf("%s needs %d memory slices; the %s has %d", describe(true, want), memory, m.Name, m.MemorySlices)
	}
	for _, p := range todo {
		// NVML's instance count: a +me profile may start anywhere but
		// holds the GPU's one set of media engines.
		if n := want[p.Name]; p.Instances > 0 && n > p.Instances {
			return nil, fmt.Errorf("%d x %s: the %s holds at most %d", n, p.Name, m.Name, p.Instances)
		}
	}
	slices.SortStableFunc(todo, func(a, b *Profile) int {
		return cmp.Or(cmp.Compare(b.MemorySlices, a.MemorySlices), cmp.Compare(b.ComputeSlices, a.ComputeSlices))
	})
	used := make([]bool, m.MemorySlices)
	out := make([]Instance, len(todo))
	var fit func(i int) bool
	fit = func(i int) bool {
		if i == len(todo) {
			return true
		}
		p := todo[i]
		for _, s := range p.Starts {
			if s+p.MemorySlices > len(used) || slices.Contains(used[s:s+p.MemorySlices], true) {
				continue
			}
			// Instances of one profile are interchangeable: trying a
			// later one at an earlier start only repeats the search.
			if i > 0 && todo[i-1] == p && s < out[i-1].Start {
				continue
			}
			fill(used[s:s+p.MemorySlices], true)
			out[i] = Instance{Profile: p.Name, GI: GIID(m.MemorySlices, p.MemorySlices, s), Start: s, Slices: p.MemorySlices}
			if fit(i + 1) {
				return true
			}
			fill(used[s:s+p.MemorySlices], false)
		}
		return false
	}
	if !fit(0) {
		return nil, fmt.Errorf("%s does not fit: the profiles' allowed placements collide (%s)", describe(true, want), placements(todo))
	}
	slices.SortFunc(out, func(a, b Instance) int { return cmp.Compare(a.GI, b.GI) })
	return out, nil
}

func fill(b []bool, v bool) {
	for i := range b {
		b[i] = v
	}
}

// placements describes where each profile may start.
func placements(ps []*Profile) string {
	var parts []string
	for _, p := range slices.Compact(slices.Clone(ps)) {
		var s []string
		for _, x := range p.Starts {
			s = append(s, fmt.Sprint(x))
		}
		parts = append(parts, fmt.Sprintf("%s spans %d memory slices from %s", p.Name, p.MemorySlices, strings.Join(s, ",")))
	}
	return strings.Join(parts, "; ")
}

// Lines returns the plan as the lines apply prints.
func (p *Plan) Lines() []string {
	if p.Selected == 0 {
		return []string{fmt.Sprintf("MIG config %q selects none of the GPUs (its entries' devices or device-filter name others): nothing to change", p.Layout)}
	}
	if p.Empty() {
		return []string{fmt.Sprintf("the GPUs already have MIG config %q: nothing to change", p.Layout)}
	}
	var out []string
	for _, g := range p.GPUs {
		at := fmt.Sprintf("GPU %d (%s, %s):", g.Index, g.Name, g.UUID)
		out = append(out, fmt.Sprintf("%s %s -> %s", at, g.Have, g.Want))
		if g.Note != "" {
			out = append(out, "  note: "+g.Note)
		}
		for _, d := range g.Destroy {
			out = append(out, fmt.Sprintf("  destroy GPU instance %d (%s) and its compute instances", d.GI, d.Profile))
		}
		if g.SetMIG != nil {
			out = append(out, fmt.Sprintf("  set MIG mode %s", map[bool]string{true: "enabled", false: "disabled"}[*g.SetMIG]))
		}
		for _, c := range g.Create {
			slots := fmt.Sprintf("memory slice %d", c.Start)
			if c.Slices > 1 {
				slots = fmt.Sprintf("memory slices %d-%d", c.Start, c.Start+c.Slices-1)
			}
			out = append(out, fmt.Sprintf("  create GPU instance %d (%s, %s) with one compute instance", c.GI, c.Profile, slots))
		}
	}
	return out
}

// Differences returns one line per GPU whose layout is not the config's;
// none when the host matches.
func (p *Plan) Differences() []string {
	var out []string
	for _, g := range p.GPUs {
		out = append(out, fmt.Sprintf("GPU %d (%s, %s): has %s; config %q wants %s", g.Index, g.Name, g.UUID, g.Have, p.Layout, g.Want))
	}
	return out
}
