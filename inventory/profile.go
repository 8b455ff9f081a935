package inventory

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpuctk/gpuctk/internal/readfile"
	"github.com/gpuctk/gpuctk/internal/tomlerr"
)

//go:embed profiles/*.toml
var profiles embed.FS

// Default majors of the dynamically numbered driver devices; a simulated
// host without a driver root uses these unless its profile says otherwise.
const (
	DefaultUVMMajor  = 510
	DefaultCapsMajor = 511
)

// Profile is a simulated host: its GPUs plus the facts about its device
// files that a real host would let discovery read (the dynamic majors).
type Profile struct {
	// Name is the embedded profile's name or the file it was read from.
	Name          string `toml:"-"`
	DriverVersion string `toml:"driver-version"`
	CUDAVersion   string `toml:"cuda-version"`
	Machine       string `toml:"machine"`
	UVMMajor      int    `toml:"uvm-major"`
	CapsMajor     int    `toml:"caps-major"`
	GPUs          []GPU  `toml:"gpu"`
}

// Host returns the host the profile describes. It makes Profile a Source.
func (p *Profile) Host() (*Host, error) {
	h := &Host{DriverVersion: p.DriverVersion, CUDAVersion: p.CUDAVersion, Machine: p.Machine}
	for _, g := range p.GPUs {
		g.MIG = append([]MIGDevice(nil), g.MIG...)
		h.GPUs = append(h.GPUs, g)
	}
	h.Sort()
	return h, nil
}

// Profiles lists the names of the embedded profiles.
func Profiles() []string {
	entries, _ := fs.ReadDir(profiles, "profiles")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".toml"))
	}
	sort.Strings(names)
	return names
}

// MaxProfileSize bounds a profile file: one of a host with a hundred GPUs
// is under 100 KiB.
const MaxProfileSize = 4 << 20

// LoadProfile returns the embedded profile called name or, when name
// contains a slash or ends in .toml, the profile file at that path.
func LoadProfile(name string) (*Profile, error) {
	var data []byte
	var err error
	if strings.ContainsRune(name, '/') || strings.HasSuffix(name, ".toml") {
		data, err = readfile.Limited(name, MaxProfileSize)
		if err != nil {
			return nil, fmt.Errorf("simulated host profile: %w", err)
		}
	} else {
		data, err = profiles.ReadFile(path.Join("profiles", name+".toml"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("simulated host %q is not known: use one of %s, or a profile file path", name, strings.Join(Profiles(), ", "))
		}
		if err != nil {
			return nil, err
		}
	}
	p, err := ParseProfile(data)
	if err != nil {
		return nil, fmt.Errorf("simulated host profile %s: %w", name, err)
	}
	p.Name = name
	return p, nil
}

// ParseProfile reads a profile from TOML and checks it.
func ParseProfile(data []byte) (*Profile, error) {
	var p Profile
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, tomlerr.Line(err)
	}
	if p.UVMMajor == 0 {
		p.UVMMajor = DefaultUVMMajor
	}
	if p.CapsMajor == 0 {
		p.CapsMajor = DefaultCapsMajor
	}
	h, _ := p.Host()
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}
