package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/readfile"
	"github.com/gpuctk/gpuctk/offer"
)

// State is what the driver serves: the published devices of one
// resolution and the CDI kind of the spec written for it. A reload builds
// a new one and swaps it whole.
type State struct {
	Set     *offer.Set
	Kind    string
	Devices []Device
	byName  map[string]Device
}

// NewState returns the state for a resolution whose spec has CDI kind
// kind ("nvidia.com/gpu").
func NewState(set *offer.Set, kind string) *State {
	s := &State{Set: set, Kind: kind, Devices: Devices(set), byName: map[string]Device{}}
	for _, d := range s.Devices {
		s.byName[d.Name] = d
	}
	return s
}

// Prepared is one prepared claim as the checkpoint records it.
type Prepared struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []PreparedDevice `json:"devices"`
}

// PreparedDevice is one allocated device of a prepared claim.
type PreparedDevice struct {
	Requests []string `json:"requests"`
	Pool     string   `json:"pool"`
	Device   string   `json:"device"`
	CDI      []string `json:"cdi"`
}

// checkpointVersion is the checkpoint's format; a driver refuses one it
// does not know rather than forget what it prepared.
const checkpointVersion = 1

type checkpoint struct {
	Version int                    `json:"version"`
	Claims  map[types.UID]Prepared `json:"claims"`
}

// maxCheckpoint caps the checkpoint read: 32 devices a claim, a few
// hundred claims a node.
const maxCheckpoint = 16 << 20

// Driver prepares and unprepares claims against the current State and
// checkpoints what it prepared.
type Driver struct {
	name, path string

	mu       sync.Mutex
	state    *State
	prepared map[types.UID]Prepared
}

// NewDriver returns the driver of the given name, which records prepared
// claims in the checkpoint file path and reads what an earlier run
// recorded there.
func NewDriver(name, path string) (*Driver, error) {
	d := &Driver{name: name, path: path, prepared: map[types.UID]Prepared{}}
	data, err := readfile.Limited(path, maxCheckpoint)
	if errors.Is(err, fs.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	var c checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w: move it away only once no pod uses a claim of this node", path, err)
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("checkpoint %s: version %d, this driver reads %d: run the driver that wrote it", path, c.Version, checkpointVersion)
	}
	if c.Claims != nil {
		d.prepared = c.Claims
	}
	return d, nil
}

// SetState swaps in what the driver serves; claims prepared before keep
// their CDI names.
func (d *Driver) SetState(s *State) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state = s
}

// Prepared returns the prepared claims.
func (d *Driver) Prepared() map[types.UID]Prepared {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.prepared)
}

// Prepare returns the CDI names of a claim's devices of this driver,
// after checking them against the current state and the claim's
// configuration, and records it in the checkpoint. A claim prepared
// before gets what it got then.
func (d *Driver) Prepare(claim *resourceapi.ResourceClaim) ([]PreparedDevice, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.prepared[claim.UID]; ok {
		return p.Devices, nil
	}
	what := "claim " + claim.Namespace + "/" + claim.Name
	if d.state == nil {
		return nil, fmt.Errorf("%s: the driver has not read the host yet", what)
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("%s: not allocated", what)
	}
	alloc := claim.Status.Allocation.Devices
	configs, err := d.configs(alloc.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	inUse := map[string]string{} // device -> claim it is prepared for
	for _, p := range d.prepared {
		for _, pd := range p.Devices {
			inUse[pd.Device] = p.Namespace + "/" + p.Name
		}
	}
	var out []PreparedDevice
	var errs []error
	for _, r := range alloc.Results {
		if r.Driver != d.name {
			continue
		}
		dev, ok := d.state.byName[r.Device]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: device %s (request %s) is not on this node any more: its GPU, MIG layout or sharing changed since the claim was allocated; delete the pod for the claim to be allocated anew", what, r.Device, r.Request))
			continue
		}
		if other, ok := inUse[r.Device]; ok {
			errs = append(errs, fmt.Errorf("%s: device %s (request %s) is already prepared for claim %s", what, r.Device, r.Request, other))
			continue
		}
		if err := checkSharing(configFor(configs, r.Request), dev); err != nil {
			errs = append(errs, fmt.Errorf("%s: request %s: %w", what, r.Request, err))
			continue
		}
		out = append(out, PreparedDevice{Requests: []string{r.Request}, Pool: r.Pool, Device: r.Device, CDI: []string{dev.CDIName(d.state.Kind)}})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d.prepared[claim.UID] = Prepared{Namespace: claim.Namespace, Name: claim.Name, Devices: out}
	if err := d.save(); err != nil {
		delete(d.prepared, claim.UID)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// Unprepare forgets a claim; one not prepared (or already unprepared) is
// no error.
func (d *Driver) Unprepare(uid types.UID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.prepared[uid]
	if !ok {
		return nil
	}
	delete(d.prepared, uid)
	if err := d.save(); err != nil {
		d.prepared[uid] = p
		return fmt.Errorf("claim %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

func (d *Driver) save() error {
	data, err := json.MarshalIndent(checkpoint{Version: checkpointVersion, Claims: d.prepared}, "", "\t")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(d.path, data, 0o600); err != nil {
		return fmt.Errorf("checkpoint %s: %w", d.path, err)
	}
	return nil
}

// requestConfig is a decoded opaque configuration and the requests it
// applies to (all when empty).
type requestConfig struct {
	requests []string
	config   *Config
}

// configs decodes the allocation's opaque configurations for this driver,
// the class's before the claim's, as the API lists them.
func (d *Driver) configs(in []resourceapi.DeviceAllocationConfiguration) ([]requestConfig, error) {
	var out []requestConfig
	for i, c := range in {
		if c.Opaque == nil || c.Opaque.Driver != d.name {
			continue
		}
		cfg, err := DecodeConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("config %d (%s): %w", i+1, c.Source, err)
		}
		out = append(out, requestConfig{c.Requests, cfg})
	}
	return out, nil
}

// configFor returns the sharing that applies to a request: the last
// configuration naming it, else the last one naming no request. A
// subrequest ("req/sub") is matched by its request too.
func configFor(configs []requestConfig, request string) *Sharing {
	base, _, _ := strings.Cut(request, "/")
	var all, named *Sharing
	for _, c := range configs {
		switch {
		case len(c.requests) == 0:
			all = c.config.Sharing
		case slices.Contains(c.requests, request) || slices.Contains(c.requests, base):
			named = c.config.Sharing
		}
	}
	if named != nil {
		return named
	}
	return all
}

// checkSharing refuses a sharing configuration the device cannot honour.
// A claim's containers and pods time-slice its device by default; MPS
// needs a replica of a device gpuctk shares through MPS, whose daemon
// runs with the limits of its [[sharing]] entry.
func checkSharing(s *Sharing, d Device) error {
	if s == nil {
		return nil
	}
	switch s.Strategy {
	case config.TimeSlicing:
		if d.Share != nil && d.Share.IsMPS() {
			return fmt.Errorf("device %s is a replica of %s shared through MPS (%s): it cannot be time-sliced; ask for a device of type gpu, mig or a time-sliced replica", d.Name, d.Share, d.Share.Origin)
		}
	case config.MPS:
		if d.Share == nil || !d.Share.IsMPS() {
			return fmt.Errorf("device %s is not shared through MPS: MPS started for a claim is not supported yet; ask for a replica whose sharingStrategy is mps (a [[sharing]] entry with strategy = \"mps\")", d.Name)
		}
		m, sh := s.MPS, d.Share
		if m != nil && (m.ActiveThreadPercentage != 0 && m.ActiveThreadPercentage != sh.ThreadPercentage ||
			m.PinnedMemoryLimit != 0 && m.PinnedMemoryLimit.MiB() != sh.PinnedMemoryMiB) {
			return fmt.Errorf("device %s: MPS limits of a claim's own are not supported yet: its replicas have activeThreadPercentage %d and pinnedMemoryLimit %dMiB (%s); leave sharing.mps out or set those", d.Name, sh.ThreadPercentage, sh.PinnedMemoryMiB, sh.Origin)
		}
	}
	return nil
}
