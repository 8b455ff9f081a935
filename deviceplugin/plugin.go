package deviceplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/hook"
	"github.com/gpuctk/gpuctk/internal/cdiresolve"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/runtime"
)

// State is one resolution of the host under the configuration: the spec
// the plugin writes and the resources it advertises from it.
type State struct {
	Spec       []byte
	Kind       string
	Resources  []offer.Resource
	Kubernetes config.Kubernetes
	// Capabilities are the capability devices every container given a
	// device gets beside it ([kubernetes] driver-capabilities, those the
	// spec has): names in the spec, as capability-graphics.
	Capabilities []string
	// DevRoot is where the device nodes are; Simulated hosts are healthy.
	DevRoot   string
	Simulated bool
	// Notes are what the operator should know of the resolution, logged
	// when it is applied.
	Notes []string
	// Runtime is the [cdi] spec-dirs and [runtime] cache-dir of the
	// configuration: gpuctk-runtime's cache is filled for each spec
	// written (runtime.WarmCache).
	Runtime *config.Config
}

// Loader reads the configuration and the host and resolves them.
type Loader func() (*State, error)

// NewState resolves set under cfg into a State; spec is the spec written,
// of kind, with the capability devices caps (cdi.Summary.Capabilities).
func NewState(cfg *config.Config, set *offer.Set, spec []byte, kind string, caps []string, simulated bool) (*State, error) {
	// Every rule of the resources was checked by offer.Resolve, as for
	// `gpuctk cdi generate`, `labels` and `config check`.
	if set.Refused != nil {
		return nil, set.Refused
	}
	rs := set.Resources
	st := &State{Spec: spec, Kind: kind, Resources: rs, Kubernetes: cfg.Kubernetes,
		DevRoot: cfg.CDI.DevRootOrDriver(), Simulated: simulated, Runtime: cfg}
	devices, _ := capability.Devices(cfg.Kubernetes.DriverCapabilities) // names checked by config
	for _, dev := range devices {
		name := strings.TrimPrefix(dev, capability.DevicePrefix)
		switch {
		case slices.Contains(caps, dev):
			st.Capabilities = append(st.Capabilities, dev)
		case slices.Contains(cfg.Kubernetes.DriverCapabilities, name):
			// Named, not just part of "all": say why it is not given.
			st.Notes = append(st.Notes, fmt.Sprintf("[kubernetes] driver-capabilities names %q but this host's driver has no files for it: containers get nothing more", name))
		}
	}
	st.Notes = append(append(st.Notes, set.Warnings...), set.Notes...)
	return st, nil
}

// Plugin runs one server per resource and keeps them registered.
type Plugin struct {
	load       Loader
	kubeletDir string
	cdiDir     string
	// configPaths are the files whose changes reload the configuration;
	// configDirs the folders any of whose files does (a folder of
	// per-node configurations).
	configPaths []string
	configDirs  []string
	health      time.Duration
	log         *slog.Logger
	// xids are the host's XID events; nil without NVML. A critical one
	// marks its devices unhealthy for recovery (0: until a restart).
	xids     <-chan inventory.XIDEvent
	recovery time.Duration
	marks    []xidMark

	state   *State
	servers map[string]*server
	// pending are the servers the kubelet has not taken yet: a kubelet
	// starting binds its socket before it listens, and one restarting
	// may refuse for a while. They are tried again on retry, with a
	// backoff from retryMin doubling to retryMax; so are the state's
	// resources whose server could not start (unserved).
	pending  map[string]bool
	unserved bool
	retry    *time.Timer
	wait     time.Duration

	// specCheck fires once the spec file has settled after an event in
	// the CDI dir. A spec another writer changed (`gpuctk mig apply`, the
	// refresh unit after a driver upgrade, an operator's generate) makes
	// the plugin read the host again; specLast and specWait space those
	// reloads out (the next no sooner than specLast+specWait), so that
	// two writers with different configurations (two plugins on one
	// node) cannot rewrite the spec in a loop.
	specCheck *time.Timer
	settle    time.Duration // see the constant
	specLast  time.Time
	specWait  time.Duration

	// The kubelet dials a plugin once, when it registers, and opens one
	// ListAndWatch; a stream that ends (the kubelet dropped the client)
	// or never comes leaves the resource unallocatable, and the kubelet
	// never asks again. lost hears of an ended stream; watchCheck fires
	// at watchAt, when checkWatched registers such resources again.
	lost       chan struct{}
	watchCheck *time.Timer
	watchAt    time.Time
	watchGrace time.Duration // see the constant

	// Reloads run off the loop (reading the config and the host, writing
	// the spec, filling the runtime's cache), so that a slow or hung one
	// never keeps the loop from answering a restarted kubelet. One runs
	// at a time: reloading says one is under way, again is the reason of
	// one asked for meanwhile, and prepared hears of the one that ended.
	reloading bool
	again     *reloadWhy
	prepared  chan reloaded
	// specBad says the spec on disk is not the state's (unreadable, or
	// not written): its devices are sent Unhealthy until it is again.
	specBad bool
}

// reloadWhy is why a reload runs: done is logged when it worked; a reload
// after the spec changed that fails is tried again later (see checkSpec).
type reloadWhy struct {
	done string
	spec bool
	// keep prepares the state again instead of loading a new one: its
	// spec is written back.
	keep bool
}

// reloaded is the end of a reload: its new state, or why there is none.
type reloaded struct {
	st  *State
	err error
	why reloadWhy
}

const (
	retryMin = 100 * time.Millisecond
	retryMax = 10 * time.Second

	// settle is how long the config file or the CDI dir must be quiet
	// after an event before the file is read: a writer's pieces, temp
	// file and rename settle.
	settle = 100 * time.Millisecond
	// A spec another writer changes makes a reload at once, then again
	// no sooner than specWaitMin after, doubling while the changes keep
	// coming, up to specWaitMax.
	specWaitMin = time.Second
	specWaitMax = 5 * time.Minute

	// watchGrace is how long after a registration the kubelet has to open
	// ListAndWatch (it does so at once), and lostGrace how long after a
	// stream ended the plugin waits before registering again: a kubelet
	// that is restarting makes its socket again meanwhile, which
	// registers everything anyway.
	watchGrace = 5 * time.Second
	lostGrace  = time.Second
)

// Option configures a Plugin.
type Option func(*Plugin)

// WithKubeletDir sets the folder of kubelet.sock and the plugin's sockets.
func WithKubeletDir(dir string) Option { return func(p *Plugin) { p.kubeletDir = dir } }

// WithCDIDir sets the folder the spec is written to.
func WithCDIDir(dir string) Option { return func(p *Plugin) { p.cdiDir = dir } }

// WithConfigPath sets the configuration file whose changes reload the plugin.
func WithConfigPath(path string) Option {
	return func(p *Plugin) { p.configPaths = append(p.configPaths, path) }
}

// WithConfigDir sets a folder of configurations (a mounted ConfigMap of
// per-node configurations) whose changes reload the plugin.
func WithConfigDir(dir string) Option {
	return func(p *Plugin) { p.configDirs = append(p.configDirs, filepath.Clean(dir)) }
}

// WithHealthInterval sets how often devices are checked.
func WithHealthInterval(d time.Duration) Option { return func(p *Plugin) { p.health = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(p *Plugin) { p.log = l } }

// xidMark is a critical XID event and when it came.
type xidMark struct {
	ev inventory.XIDEvent
	at time.Time
}

// WithXIDEvents sets where critical-error events come from (nvmlhost's
// WatchXIDs): a device with a critical XID is sent Unhealthy, and its
// replicas with it.
func WithXIDEvents(ch <-chan inventory.XIDEvent) Option { return func(p *Plugin) { p.xids = ch } }

// WithXIDRecovery sets how long a device stays Unhealthy after its last
// critical XID; 0 keeps it Unhealthy until the plugin restarts.
func WithXIDRecovery(d time.Duration) Option { return func(p *Plugin) { p.recovery = d } }

// New returns a Plugin that resolves what to advertise with load.
func New(load Loader, opts ...Option) *Plugin {
	p := &Plugin{
		load: load, kubeletDir: "/var/lib/kubelet/device-plugins", cdiDir: "/var/run/cdi",
		health: 10 * time.Second, recovery: 10 * time.Minute, log: slog.Default(), servers: map[string]*server{},
		pending: map[string]bool{}, settle: settle,
		lost: make(chan struct{}, 1), watchGrace: watchGrace,
		// Buffered: a reload ending after Run returned does not wait.
		prepared: make(chan reloaded, 1),
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func (p *Plugin) kubeletSock() string { return filepath.Join(p.kubeletDir, "kubelet.sock") }

// Run advertises the host until ctx ends. A bad configuration or host at
// start is an error; later, a bad reload keeps the last good state.
func (p *Plugin) Run(ctx context.Context) error {
	if p.health <= 0 {
		return fmt.Errorf("health check interval %v: must be more than 0", p.health)
	}
	if p.recovery < 0 {
		return fmt.Errorf("XID recovery time %v: must be 0 (Unhealthy until a restart) or more", p.recovery)
	}
	st, err := p.load()
	if err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching files: %w", err)
	}
	defer w.Close()
	if err := w.Add(p.kubeletDir); err != nil {
		return fmt.Errorf("kubelet dir %s: %w", p.kubeletDir, err)
	}
	// The folder, not the file: editors and ConfigMaps replace it. A node
	// with no config folder runs on the defaults.
	watched := map[string]bool{}
	for _, dir := range p.configDirs {
		watched[dir] = true
	}
	for _, path := range p.configPaths {
		watched[filepath.Dir(filepath.Clean(path))] = true
	}
	for _, dir := range slices.Sorted(maps.Keys(watched)) {
		if err := w.Add(dir); errors.Is(err, fs.ErrNotExist) {
			p.log.Info("no config folder: changes will not be seen until a restart", "folder", dir)
		} else if err != nil {
			return fmt.Errorf("config folder %s: %w", dir, err)
		}
	}
	defer p.stopAll()
	// Armed by the registrations apply makes.
	p.watchCheck = time.NewTimer(0)
	p.watchCheck.Stop()
	defer p.watchCheck.Stop()
	if err := p.apply(ctx, st); err != nil {
		if p.state != st {
			return err
		}
		// Applied, but a resource's socket could not be made (something
		// else in its place): it is tried again with the registrations,
		// as after a reload, and the other resources are served meanwhile.
		p.log.Error("not every resource is served yet: trying again", "err", err)
	}
	// The spec's folder exists now (apply wrote the spec there).
	if err := w.Add(p.cdiDir); err != nil {
		p.log.Warn("CDI dir not watched: a spec another writer changes (gpuctk mig apply, a driver upgrade's refresh) is not seen until a config change or a restart", "dir", p.cdiDir, "err", err)
	}
	// Armed: a change to the spec between its write and the watch is
	// seen all the same.
	p.specCheck = time.NewTimer(p.settle)
	defer p.specCheck.Stop()
	// A config written in place (truncated, then written in pieces) is
	// read once its writes have settled: a file read half-written could
	// parse, as replicas = 1 of replicas = 10.
	configCheck := time.NewTimer(0)
	configCheck.Stop()
	defer configCheck.Stop()
	p.specWait = specWaitMin
	tick := time.NewTicker(p.health)
	defer tick.Stop()
	p.retry = time.NewTimer(0)
	p.retry.Stop()
	defer p.retry.Stop()
	p.wait = retryMin
	p.scheduleRetry()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.retry.C:
			p.registerPending(ctx)
			p.scheduleRetry()
		case <-p.lost:
			p.armWatchCheck(time.Now(), lostGrace)
		case <-p.watchCheck.C:
			p.watchAt = time.Time{}
			p.checkWatched(ctx, time.Now())
			p.scheduleRetry()
		case err := <-w.Errors:
			p.log.Warn("file watch", "err", err)
		case ev := <-w.Events:
			switch {
			case ev.Name == p.kubeletSock() && ev.Has(fsnotify.Create):
				// A restarted kubelet forgets every plugin and clears
				// the folder: serve again and register again. The spec
				// written for the state is still there: not written
				// again, a spec that cannot be written now does not
				// leave the node without resources.
				p.log.Info("kubelet restarted: registering again")
				p.stopAll()
				if err := p.serve(ctx, p.state); err != nil {
					p.log.Error("registering again", "err", err)
				}
				p.wait = retryMin
				p.scheduleRetry()
			case p.configChanged(ev):
				configCheck.Reset(p.settle)
			case filepath.Clean(ev.Name) == p.specPath():
				p.specCheck.Reset(p.settle)
			}
		case <-configCheck.C:
			p.reload(reloadWhy{done: "config reloaded"})
		case r := <-p.prepared:
			p.reloadDone(ctx, r)
			p.scheduleRetry()
		case <-p.specCheck.C:
			p.checkSpec(ctx, time.Now())
			p.scheduleRetry()
		case ev, ok := <-p.xids:
			if !ok {
				p.log.Warn("XID events ended: critical errors are no longer seen")
				p.xids = nil
				continue
			}
			if !ev.Critical() {
				p.log.Info("application XID: device stays healthy", "gpu", ev.GPU, "gi", ev.GI, "ci", ev.CI, "xid", ev.XID)
				continue
			}
			p.log.Warn("critical XID: device unhealthy", "gpu", ev.GPU, "gi", ev.GI, "ci", ev.CI, "xid", ev.XID)
			p.mark(ev, time.Now())
			p.checkHealth()
		case <-tick.C:
			p.checkHealth()
		}
	}
}

// configChanged reports whether ev changes the configuration file: it is
// written or replaced (a file moved onto it is a Create), or, in a
// ConfigMap volume, where the file links through ..data, the kubelet
// swapped that link for the new version. The file moved away (Rename) is
// no change: an editor saving so writes the new file next, and reading
// none meanwhile would run on the defaults.
func (p *Plugin) configChanged(ev fsnotify.Event) bool {
	if !ev.Has(fsnotify.Write | fsnotify.Create) {
		return false
	}
	name := filepath.Clean(ev.Name)
	if slices.Contains(p.configDirs, filepath.Dir(name)) {
		return true // any file of a folder of configurations
	}
	for _, path := range p.configPaths {
		if name == filepath.Clean(path) || name == filepath.Join(filepath.Dir(path), "..data") {
			return true
		}
	}
	return false
}

// reload builds a new state off the loop (see reloadDone), or, while one
// is under way, once it has ended.
func (p *Plugin) reload(why reloadWhy) {
	if p.reloading {
		// One reload after it does for all asked meanwhile; one that
		// loads anew (and writes its spec) does for a spec written back.
		switch {
		case p.again == nil || p.again.keep:
			p.again = &why
		case why.spec:
			p.again.spec = true
		}
		return
	}
	p.reloading = true
	kept := p.state
	go func() {
		st, err := kept, error(nil)
		if !why.keep {
			st, err = p.load()
		}
		if err == nil {
			err = p.prepare(st)
		}
		p.prepared <- reloaded{st: st, err: err, why: why}
	}()
}

// reloadDone swaps in the state a reload built, whole, or keeps the old
// one and says why; then it starts the reload asked for meanwhile.
func (p *Plugin) reloadDone(ctx context.Context, r reloaded) {
	p.reloading = false
	switch {
	case r.err != nil:
		p.log.Error("reload failed: keeping the last good state", "err", r.err)
		if r.why.spec && p.specBad && !r.why.keep && p.again == nil {
			// The spec is gone and no new one came: the last good
			// state's is written back, which its devices need.
			p.again = &reloadWhy{done: "the CDI spec of the last good state was written back", spec: true, keep: true}
		} else if r.why.spec {
			p.specCheck.Reset(p.specWait)
		}
	default:
		if err := p.install(ctx, r.st); err != nil {
			p.log.Error("reload", "err", err)
		} else {
			p.log.Info(r.why.done, "resources", len(r.st.Resources))
		}
	}
	if why := p.again; why != nil {
		p.again = nil
		p.reload(*why)
	}
}

// specPath is the spec the plugin writes and hands out names from.
func (p *Plugin) specPath() string {
	return filepath.Join(filepath.Clean(p.cdiDir), cdi.DefaultSpecName)
}

// checkSpec reads the spec file after a change in the CDI dir. Its own
// bytes are the plugin's own write, or a writer that agrees. Other bytes,
// or no file, mean another writer changed it: `gpuctk mig apply` with a
// new layout, the refresh unit after a driver upgrade. The names the
// plugin advertises may then mean other devices, or none: it reads the
// host again, advertises what it finds and writes its spec. A reload that
// fails is tried again later; so is one that comes too soon after the
// last (see specWait).
func (p *Plugin) checkSpec(ctx context.Context, now time.Time) {
	if p.reloading {
		// The reload writes the spec: look again once it is done.
		p.specCheck.Reset(p.settle)
		return
	}
	path := p.specPath()
	data, err := cdi.ReadSpecFile(path)
	if err == nil && bytes.Equal(data, p.state.Spec) {
		p.setSpecBad(false)
		return
	}
	if errors.Is(err, fs.ErrNotExist) {
		// No spec resolves the names until the reload below writes one.
		p.setSpecBad(true)
	} else if err != nil {
		// A FIFO, a link, a folder where the spec was: no writer's spec,
		// so the plugin's own is written back in its place, at once. The
		// names it hands out resolve to nothing meanwhile: Unhealthy.
		p.log.Warn("the CDI spec cannot be read: taking its path back; its devices are Unhealthy until then", "spec", path, "err", err)
		p.setSpecBad(true)
		p.reload(reloadWhy{done: "the CDI spec was written back", spec: true, keep: true})
		return
	}
	if next := p.specLast.Add(p.specWait); now.Before(next) {
		p.specCheck.Reset(next.Sub(now))
		return
	}
	// Changes that keep coming space the reloads out further: two
	// writers that disagree (two plugins on one node, each with its own
	// configuration) would otherwise rewrite the spec in turn forever.
	if !p.specLast.IsZero() && now.Sub(p.specLast) < 4*p.specWait {
		p.specWait = min(2*p.specWait, specWaitMax)
		if p.specWait >= 8*specWaitMin {
			p.log.Warn("the CDI spec keeps being rewritten with other devices than this plugin's: another gpuctk-device-plugin on this node, or a gpuctk cdi generate with another configuration? The plugin writes its own at most every "+p.specWait.String(), "spec", path)
		}
	} else {
		p.specWait = specWaitMin
	}
	p.specLast = now
	why := "changed by another writer"
	if errors.Is(err, fs.ErrNotExist) {
		why = "removed"
	}
	p.log.Info("the CDI spec was "+why+": reading the host again", "spec", path)
	p.reload(reloadWhy{done: "reloaded after the spec changed", spec: true})
}

// setSpecBad records whether the spec on disk backs the state's devices,
// and sends their health when that changed.
func (p *Plugin) setSpecBad(bad bool) {
	if p.specBad != bad {
		p.specBad = bad
		p.checkHealth()
	}
}

// maxSocketPath is the longest path a Unix socket can be bound at: 108
// bytes of sun_path, with the terminating NUL.
const maxSocketPath = 107

// CheckSockets reports the resources of st whose socket in kubeletDir a
// Unix socket's path cannot hold: the plugin refuses such a state. A
// Loader with side effects (labels, mount points) calls it before them,
// so that a state the plugin refuses leaves the last good one's.
func (st *State) CheckSockets(kubeletDir string) error {
	var errs []error
	for i := range st.Resources {
		if sock := filepath.Join(kubeletDir, socketName(st.Resources[i].Name)); len(sock) > maxSocketPath {
			errs = append(errs, fmt.Errorf("%s: its socket %s is %d bytes, over the %d a Unix socket's path can hold: choose a shorter resource name, or a shorter --kubelet-dir",
				&st.Resources[i], sock, len(sock), maxSocketPath))
		}
	}
	return errors.Join(errs...)
}

// apply prepares st and installs it: at start, on the loop.
func (p *Plugin) apply(ctx context.Context, st *State) error {
	if err := p.prepare(st); err != nil {
		return err
	}
	return p.install(ctx, st)
}

// prepare writes st's spec and fills gpuctk-runtime's cache for it: the
// part of a reload that reads and writes files, run off the loop. The
// spec's path is the plugin's own: a FIFO, a link or a folder that
// appeared there is replaced, never followed.
func (p *Plugin) prepare(st *State) error {
	if err := st.CheckSockets(p.kubeletDir); err != nil {
		return err
	}
	spec := p.specPath()
	// A spec already holding these bytes (written by the refresh unit, or
	// by `gpuctk mig apply` with the same configuration) is kept: a new
	// file would only make every reader of the spec dirs read it again.
	if old, err := cdi.ReadSpecFile(spec); err != nil || !bytes.Equal(old, st.Spec) {
		was, err := cdi.ReclaimSpec(spec, st.Spec)
		if err != nil {
			return fmt.Errorf("CDI spec %s: %w", spec, err)
		}
		if was != "" {
			p.log.Warn("the CDI spec's path held "+was+": replaced by the spec", "spec", spec)
		}
	}
	if st.Runtime != nil {
		// The first container start after the change is then as fast as
		// any; gpuctk-runtime resolves the spec itself otherwise.
		if _, err := runtime.WarmCache(st.Runtime, spec, cdiresolve.Entry); err != nil {
			p.log.Warn("gpuctk-runtime's device cache not filled for the new spec", "err", err)
		}
	}
	return nil
}

// install makes st, prepared, the state, and serves and registers its
// resources.
func (p *Plugin) install(ctx context.Context, st *State) error {
	p.state = st
	p.specBad = false
	for _, n := range st.Notes {
		p.log.Warn(n)
	}
	return p.serve(ctx, st)
}

// serve serves and registers st's resources: servers of resources still
// there get the new devices, new resources get a server, and gone ones
// are stopped.
func (p *Plugin) serve(ctx context.Context, st *State) error {
	unhealthy := p.unhealthy(st)
	keep := map[string]bool{}
	var errs []error
	for i := range st.Resources {
		r := &st.Resources[i]
		keep[r.Name] = true
		if s := p.servers[r.Name]; s != nil {
			s.update(st, r, unhealthy)
			continue
		}
		s := newServer(p.kubeletDir, st, r, p.log, p.lost)
		s.unhealthy = unhealthy
		if err := s.start(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r, err))
			continue
		}
		p.servers[r.Name] = s
		if err := s.register(ctx, p.kubeletSock()); err != nil {
			// The kubelet may not be up yet, or not listening yet:
			// retried with a backoff, and at once when its socket is
			// made again.
			p.log.Warn("not registered yet: trying again", "err", err)
			p.pending[r.Name] = true
			continue
		}
		p.registered(s)
		p.log.Info("registered", "resource", r.Name, "devices", len(r.Devices), "socket", s.socket)
	}
	p.unserved = len(errs) > 0
	for name, s := range p.servers {
		if !keep[name] {
			s.stop()
			delete(p.servers, name)
			delete(p.pending, name)
			p.log.Info("resource no longer offered", "resource", name)
		}
	}
	return errors.Join(errs...)
}

// registerPending starts the servers that could not start, and tries
// those the kubelet has not taken again. Every pending name has a server:
// both are dropped together.
func (p *Plugin) registerPending(ctx context.Context) {
	if p.unserved {
		if err := p.serve(ctx, p.state); err != nil {
			p.log.Debug("not serving yet", "err", err)
		}
	}
	for name := range p.pending {
		s := p.servers[name]
		if err := s.register(ctx, p.kubeletSock()); err != nil {
			p.log.Debug("not registered yet", "err", err)
			continue
		}
		delete(p.pending, name)
		p.registered(s)
		p.log.Info("registered", "resource", name, "devices", s.devices(), "socket", s.socket)
	}
	if len(p.pending) == 0 && !p.unserved {
		p.wait = retryMin
	}
}

// registered records that the kubelet took s's registration, and checks
// after watchGrace that it watches s.
func (p *Plugin) registered(s *server) {
	now := time.Now()
	s.setRegistered(now)
	p.armWatchCheck(now, p.watchGrace)
}

// armWatchCheck makes checkWatched run d after now, or sooner if it is
// due sooner already.
func (p *Plugin) armWatchCheck(now time.Time, d time.Duration) {
	if p.watchCheck == nil {
		return
	}
	at := now.Add(d)
	if p.watchAt.IsZero() || at.Before(p.watchAt) {
		p.watchAt = at
		p.watchCheck.Reset(d)
	}
}

// checkWatched registers again each registered resource with no open
// ListAndWatch stream for watchGrace since its registration: the kubelet
// dropped or never opened its watch, and would keep the resource
// unallocatable until the plugin registers it again (or restarts).
func (p *Plugin) checkWatched(ctx context.Context, now time.Time) {
	again := false
	for name, s := range p.servers {
		watched, at := s.watched()
		if watched || at.IsZero() || p.pending[name] {
			continue
		}
		if wait := at.Add(p.watchGrace).Sub(now); wait > 0 {
			p.armWatchCheck(now, wait)
			continue
		}
		// Info: a kubelet that is restarting drops every watch too.
		p.log.Info("the kubelet is not watching the resource (restarting, or it dropped the plugin's client): registering it again", "resource", name)
		s.setRegistered(time.Time{})
		p.pending[name] = true
		again = true
	}
	if again {
		p.wait = retryMin
		p.registerPending(ctx)
	}
}

// scheduleRetry arms the retry timer while registrations are pending or
// servers could not start, doubling the wait each time up to retryMax.
func (p *Plugin) scheduleRetry() {
	if p.retry == nil || (len(p.pending) == 0 && !p.unserved) {
		return
	}
	p.retry.Reset(p.wait)
	p.wait = min(2*p.wait, retryMax)
}

func (p *Plugin) stopAll() {
	for name, s := range p.servers {
		s.stop()
		delete(p.servers, name)
		delete(p.pending, name)
	}
}

// mark records a critical XID of a device, replacing the device's last
// one: its recovery counts from the latest, and a device repeating an XID
// keeps one mark, not one per event.
func (p *Plugin) mark(ev inventory.XIDEvent, at time.Time) {
	p.marks = slices.DeleteFunc(p.marks, func(m xidMark) bool {
		return m.ev.GPU == ev.GPU && m.ev.GI == ev.GI && m.ev.CI == ev.CI
	})
	p.marks = append(p.marks, xidMark{ev: ev, at: at})
}

// checkHealth sends the servers the devices' health when it changed.
func (p *Plugin) checkHealth() {
	unhealthy := p.unhealthy(p.state)
	for i := range p.state.Resources {
		r := &p.state.Resources[i]
		s := p.servers[r.Name]
		if s == nil {
			continue
		}
		s.mu.Lock()
		same := len(s.unhealthy) == len(unhealthy)
		for id := range s.unhealthy {
			same = same && unhealthy[id]
		}
		s.mu.Unlock()
		if !same {
			p.log.Warn("device health changed", "resource", r.Name, "unhealthy", len(unhealthy))
			s.update(p.state, r, unhealthy)
		}
	}
}

// unhealthy returns the IDs of devices whose node is gone, whose MPS
// daemon does not answer, or that had a critical XID less than the
// recovery time ago; under simulation every device is healthy.
func (p *Plugin) unhealthy(st *State) map[string]bool {
	out := map[string]bool{}
	if p.specBad {
		// No readable spec backs the names: every device, simulated too.
		for _, r := range st.Resources {
			for _, d := range r.Devices {
				out[d.Name()] = true
			}
		}
		return out
	}
	if st.Simulated {
		return out
	}
	if p.recovery > 0 {
		p.marks = slices.DeleteFunc(p.marks, func(m xidMark) bool { return time.Since(m.at) >= p.recovery })
	}
	// A device's replicas share its node and daemon: one check each, all
	// at once, so that daemons that do not answer cost the loop one
	// connect timeout, not one each.
	seen, checked := map[string]bool{}, map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range st.Resources {
		for _, d := range r.Devices {
			if seen[d.UUID()] {
				continue
			}
			seen[d.UUID()] = true
			wg.Go(func() {
				err := deviceHealth(st.DevRoot, d)
				mu.Lock()
				checked[d.UUID()] = err
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	for _, r := range st.Resources {
		for _, d := range r.Devices {
			if checked[d.UUID()] != nil {
				out[d.Name()] = true
			}
			for _, m := range p.marks {
				if m.ev.Concerns(d.Device) {
					out[d.Name()] = true
				}
			}
		}
	}
	return out
}

// deviceHealth checks what a container of the device needs on the host:
// its GPU's node, and for MPS the daemon gpuctk started, answering on its
// control socket: the hook's own mps-check, which a socket a tenant
// planted in the pipe folder does not fool.
func deviceHealth(devRoot string, d offer.Device) error {
	node := filepath.Join(devRoot, "dev", fmt.Sprintf("nvidia%d", d.GPU.Minor))
	if _, err := os.Stat(node); err != nil {
		return fmt.Errorf("%s: %w", d.Device, err)
	}
	if d.Share != nil && d.Share.IsMPS() {
		if err := hook.CheckMPS(d.Share.PipeDir(), d.Share.UUID()); err != nil {
			return fmt.Errorf("%s: %w", d.Device, err)
		}
	}
	return nil
}
