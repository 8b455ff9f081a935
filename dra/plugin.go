package dra

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/deviceplugin"
	"github.com/gpuctk/gpuctk/internal/nodespec"
	"github.com/gpuctk/gpuctk/mps"
)

// DefaultName is the driver's name unless [dra] driver-name sets another.
const DefaultName = "gpu.gpuctk.io"

// CheckpointName is the checkpoint's file in the plugin's data folder.
const CheckpointName = "checkpoint.json"

// Loader reads the host and the configuration into the node's resolution
// and spec; it runs at start and at every configuration change.
type Loader func() (*nodespec.Node, error)

// Plugin serves a Driver to the kubelet and publishes its devices.
type Plugin struct {
	name, nodeName string
	load           Loader
	client         kubernetes.Interface
	cdiDir         string
	pluginDir      string
	registrarDir   string
	devicePlugins  string
	configPath     string
	log            *slog.Logger

	driver *Driver
	helper *kubeletplugin.Helper
	// stop ends Run on an error the helper cannot recover from.
	stop context.CancelCauseFunc
}

// Option sets a Plugin's option.
type Option func(*Plugin)

// WithCDIDir sets where the spec is written (default /var/run/cdi).
func WithCDIDir(dir string) Option { return func(p *Plugin) { p.cdiDir = dir } }

// WithPluginDir sets the folder of the DRA socket and the checkpoint
// (default /var/lib/kubelet/plugins/NAME).
func WithPluginDir(dir string) Option { return func(p *Plugin) { p.pluginDir = dir } }

// WithRegistrarDir sets the kubelet's plugin registration folder (default
// /var/lib/kubelet/plugins_registry).
func WithRegistrarDir(dir string) Option { return func(p *Plugin) { p.registrarDir = dir } }

// WithDevicePluginDir sets the kubelet's device-plugins folder, where a
// running gpuctk-device-plugin has its sockets ("" checks nothing).
func WithDevicePluginDir(dir string) Option { return func(p *Plugin) { p.devicePlugins = dir } }

// WithConfigPath sets the configuration file watched for changes.
func WithConfigPath(path string) Option { return func(p *Plugin) { p.configPath = path } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(p *Plugin) { p.log = l } }

// New returns the plugin of driver name on node nodeName, publishing
// through client.
func New(name, nodeName string, client kubernetes.Interface, load Loader, opts ...Option) *Plugin {
	p := &Plugin{name: name, nodeName: nodeName, client: client, load: load,
		cdiDir: "/var/run/cdi", registrarDir: kubeletplugin.KubeletRegistryDir,
		log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(p)
	}
	if p.pluginDir == "" {
		p.pluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, name)
	}
	return p
}

// Run serves until ctx ends. A bad host or configuration at start is an
// error; later, a bad reload keeps the last good state and says why.
func (p *Plugin) Run(ctx context.Context) error {
	if p.nodeName == "" {
		return errors.New("no node name: set --node-name or NODE_NAME (the DaemonSet passes spec.nodeName)")
	}
	if err := p.checkDevicePlugin(); err != nil {
		return err
	}
	ctx, p.stop = context.WithCancelCause(ctx)
	defer p.stop(nil)
	if err := os.MkdirAll(p.pluginDir, 0o750); err != nil {
		return fmt.Errorf("plugin folder: %w", err)
	}
	var err error
	if p.driver, err = NewDriver(p.name, filepath.Join(p.pluginDir, CheckpointName)); err != nil {
		return err
	}
	// Followed before the first load: a change meanwhile is not missed.
	w := p.watcher()
	if w != nil {
		defer w.Close()
	}
	st, err := p.apply()
	if err != nil {
		return err
	}
	if p.helper, err = kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(p.name),
		kubeletplugin.KubeClient(p.client),
		kubeletplugin.NodeName(p.nodeName),
		kubeletplugin.PluginDataDirectoryPath(p.pluginDir),
		kubeletplugin.RegistrarDirectoryPath(p.registrarDir)); err != nil {
		return fmt.Errorf("DRA driver %s: %w", p.name, err)
	}
	defer p.helper.Stop()
	if err := p.publish(ctx, st); err != nil {
		if ctx.Err() != nil { // stopped while the informer synced
			return nil
		}
		return err
	}
	p.log.Info("serving", "driver", p.name, "node", p.nodeName, "devices", len(st.Devices))
	p.watch(ctx, w)
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// checkDevicePlugin refuses to serve GPUs gpuctk-device-plugin serves:
// the two would hand the same devices to different pods.
func (p *Plugin) checkDevicePlugin() error {
	if p.devicePlugins == "" {
		return nil
	}
	socks, _ := filepath.Glob(filepath.Join(p.devicePlugins, deviceplugin.SocketPattern))
	for _, s := range socks {
		if c, err := net.DialTimeout("unix", s, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("gpuctk-device-plugin serves this node's GPUs (its socket %s answers): run the device plugin or the DRA driver on a node, not both", s)
		}
	}
	return nil
}

// apply loads the node, writes its spec and swaps the driver's state.
func (p *Plugin) apply() (*State, error) {
	n, err := p.load()
	if err != nil {
		return nil, err
	}
	// The spec's MPS edits mount these folders.
	if err := mps.MountPoints(n.Set.MPS()); err != nil {
		return nil, err
	}
	spec := filepath.Join(p.cdiDir, cdi.DefaultSpecName)
	if old, err := cdi.ReadSpecFile(spec); err != nil || !bytes.Equal(old, n.Spec) {
		if err := cdi.WriteSpec(spec, n.Spec); err != nil {
			return nil, fmt.Errorf("CDI spec %s: %w", spec, err)
		}
	}
	st := NewState(n.Set, n.Kind)
	p.driver.SetState(st)
	return st, nil
}

// publish publishes the state's devices as the node's pool.
func (p *Plugin) publish(ctx context.Context, st *State) error {
	pool := resourceslice.Pool{}
	for _, devs := range Slices(st.Set.Host, st.Devices) {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs})
	}
	return p.helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{p.nodeName: pool}})
}

// watcher follows the configuration's folder (an editor or a ConfigMap
// update replaces the file); nil when there is none to follow.
func (p *Plugin) watcher() *fsnotify.Watcher {
	if p.configPath == "" {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(filepath.Dir(p.configPath)); err != nil {
			w.Close()
		}
	}
	if err != nil {
		p.log.Warn("config changes are not followed", "config", p.configPath, "err", err)
		return nil
	}
	return w
}

// watch reloads on every configuration change w reports until ctx ends.
func (p *Plugin) watch(ctx context.Context, w *fsnotify.Watcher) {
	if w == nil {
		<-ctx.Done()
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-w.Errors:
			p.log.Warn("watching the config", "err", err)
		case ev := <-w.Events:
			name := filepath.Clean(ev.Name)
			if !ev.Has(fsnotify.Write|fsnotify.Create) || name != filepath.Clean(p.configPath) && name != filepath.Join(filepath.Dir(p.configPath), "..data") {
				continue
			}
			st, err := p.apply()
			if err == nil {
				err = p.publish(ctx, st)
			}
			if err != nil {
				p.log.Error("config change not applied: the last good one stays", "config", p.configPath, "err", err)
				continue
			}
			p.log.Info("config reloaded", "devices", len(st.Devices))
		}
	}
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *Plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := p.driver.Prepare(c)
		if err != nil {
			p.log.Error("prepare", "err", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		r := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{}}
		for _, d := range devs {
			r.Devices = append(r.Devices, kubeletplugin.Device{Requests: d.Requests, PoolName: d.Pool, DeviceName: d.Device, CDIDeviceIDs: d.CDI})
		}
		out[c.UID] = r
	}
	return out, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *Plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = p.driver.Unprepare(c.UID)
	}
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: errors in the
// background are logged; the helper retries the recoverable ones
// (publishing ResourceSlices), the others (a gRPC server failed) end Run.
func (p *Plugin) HandleError(_ context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		p.log.Error(msg, "err", err)
		return
	}
	p.stop(fmt.Errorf("%s: %w", msg, err))
}
