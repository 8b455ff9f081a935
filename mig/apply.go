package mig

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpuctk/gpuctk/offer"
)

// Device carries out MIG changes on the GPUs of a host, named by UUID:
// NVML on a real host, a Simulator on a profile file.
type Device interface {
	// Profiles tells the GPU's MIG profiles, for the instances of a plan
	// made before the GPU could tell them (MIG mode off).
	Profiles
	// Busy describes what uses the GPU (its compute processes), empty
	// when nothing does.
	Busy(gpu string) (string, error)
	SetMIGMode(gpu string, enabled bool) error
	// GPUInstances lists the ids of the GPU's GPU instances, whether they
	// hold compute instances or not.
	GPUInstances(gpu string) ([]int, error)
	// DestroyGPUInstance destroys a GPU instance and its compute
	// instances.
	DestroyGPUInstance(gpu string, gi int) error
	// CreateGPUInstance creates a GPU instance of profile p at the memory
	// slice start and returns its id.
	CreateGPUInstance(gpu string, p *Profile, start int) (int, error)
	// CreateComputeInstance creates in GPU instance gi the one compute
	// instance that spans it.
	CreateComputeInstance(gpu string, gi int, p *Profile) error
}

// ApplyOption changes how Apply works.
type ApplyOption func(*applier)

type applier struct {
	mpsStateRoot string
}

// WithMPSStateRoot makes Apply refuse to change a GPU for which gpuctk's
// MPS state root (config [mps] state-root) records a daemon, on the GPU or
// on one of its MIG devices.
func WithMPSStateRoot(root string) ApplyOption {
	return func(a *applier) { a.mpsStateRoot = root }
}

// Apply carries out a plan. Before it changes anything it checks every GPU
// the plan changes and refuses, naming the GPU, when one has compute
// processes or an MPS daemon. A GPU is rebuilt from what the device
// reports, not from the plan's list, so a GPU instance that a failed apply
// left without its compute instance is destroyed too; planning again from
// the host's state and applying converges.
func Apply(p *Plan, d Device, opts ...ApplyOption) error {
	var a applier
	for _, o := range opts {
		o(&a)
	}
	for _, g := range p.GPUs {
		busy, err := d.Busy(g.UUID)
		if err != nil {
			return fmt.Errorf("GPU %d (%s): %w", g.Index, g.UUID, err)
		}
		if busy != "" {
			return fmt.Errorf("GPU %d (%s): %s: stop them before changing its MIG layout; nothing was changed", g.Index, g.UUID, busy)
		}
		if err := a.checkMPS(g); err != nil {
			return err
		}
	}
	for _, g := range p.GPUs {
		if err := applyGPU(&g, d); err != nil {
			return fmt.Errorf("GPU %d (%s): %w: run apply again to finish", g.Index, g.UUID, err)
		}
	}
	return nil
}

func applyGPU(g *GPUPlan, d Device) error {
	if g.SetMIG == nil || !*g.SetMIG {
		gis, err := d.GPUInstances(g.UUID)
		if err != nil {
			return fmt.Errorf("list GPU instances: %w", err)
		}
		for _, gi := range gis {
			if err := d.DestroyGPUInstance(g.UUID, gi); err != nil {
				return fmt.Errorf("destroy GPU instance %d: %w", gi, err)
			}
		}
	}
	if g.SetMIG != nil {
		if err := d.SetMIGMode(g.UUID, *g.SetMIG); err != nil {
			return fmt.Errorf("set MIG mode: %w", err)
		}
	}
	if g.replan && g.SetMIG != nil && *g.SetMIG {
		m, err := d.Model(g.gpu)
		if err != nil {
			return fmt.Errorf("MIG profiles with MIG mode on: %w", err)
		}
		create, err := Place(m, g.want)
		if err != nil {
			return fmt.Errorf("with the driver's MIG profiles: %w", err)
		}
		g.model, g.Create = m, create
	}
	for _, c := range g.Create {
		p, _ := g.model.Profile(c.Profile)
		id, err := d.CreateGPUInstance(g.UUID, p, c.Start)
		if err != nil {
			return fmt.Errorf("create GPU instance %s at memory slice %d: %w", c.Profile, c.Start, err)
		}
		if err := d.CreateComputeInstance(g.UUID, id, p); err != nil {
			return fmt.Errorf("create compute instance in GPU instance %d (%s): %w", id, c.Profile, err)
		}
	}
	return nil
}

// checkMPS refuses a GPU that has an MPS daemon recorded in the state
// root (see package mps: one folder per device UUID with a device.json).
func (a *applier) checkMPS(g GPUPlan) error {
	if a.mpsStateRoot == "" {
		return nil
	}
	entries, err := os.ReadDir(a.mpsStateRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("MPS state: %w", err)
	}
	for _, e := range entries {
		path := filepath.Join(a.mpsStateRoot, e.Name(), "device.json")
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// Package mps records the device it serves as an offer.Share
		// (and the daemon's pid, which does not matter here); package
		// mps itself links NVML, which mig must not.
		var rec offer.Share
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("MPS state %s: %w", path, err)
		}
		if rec.GPU == nil || rec.GPU.UUID != g.UUID {
			continue
		}
		return fmt.Errorf("GPU %d (%s): an MPS daemon serves %s (%s): stop it with gpuctk mps stop before changing the GPU's MIG layout; nothing was changed", g.Index, g.UUID, rec.Device, path)
	}
	return nil
}
