package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/deviceplugin"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/nodespec"
	"github.com/gpuctk/gpuctk/internal/readfile"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/labels"
	"github.com/gpuctk/gpuctk/mps"
	"github.com/gpuctk/gpuctk/nvconfig"
)

// envVar is the environment variable a flag reads: GPUCTK_KUBELET_DIR for
// --kubelet-dir.
func envVar(flag string) []string {
	return []string{"GPUCTK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Value: config.DefaultPath, EnvVars: envVar("config"), Usage: "configuration file, [kubernetes] included; reloaded when it changes"},
		&cli.StringFlag{Name: "config-dir", EnvVars: envVar("config-dir"), Usage: "a folder of configurations, one file per name (NAME or NAME.toml), as a mounted ConfigMap gives, instead of --config: the node's is the one --config-name-file names, else --config-default, else one named default, else the only one; switched without a restart when either changes"},
		&cli.StringFlag{Name: "config-default", EnvVars: envVar("config-default"), Usage: "with --config-dir: the configuration of a node whose --config-name-file names none"},
		&cli.StringFlag{Name: "config-name-file", EnvVars: envVar("config-name-file"), Usage: "with --config-dir: a file holding the name of this node's configuration (its nvidia.com/device-plugin.config label); missing or empty: --config-default"},
		&cli.StringFlag{Name: "node-name", EnvVars: append(envVar("node-name"), "NODE_NAME"), Usage: "with --config-dir and --config-name-file: read this node's --node-config-label from the API server (the pod's service account, RBAC get on nodes) into the name file, now and every --node-label-interval"},
		&cli.StringFlag{Name: "node-config-label", Value: "nvidia.com/device-plugin.config", EnvVars: envVar("node-config-label"), Usage: "the node label naming the node's configuration (--node-name)"},
		&cli.StringFlag{Name: "service-account-dir", Value: serviceAccountDir, EnvVars: envVar("service-account-dir"), Usage: "with --node-name: the folder of the service account's token and the cluster's CA (ca.crt), as a pod has them"},
		&cli.DurationFlag{Name: "node-label-interval", Value: 30 * time.Second, EnvVars: envVar("node-label-interval"), Usage: "how often --node-name reads the node's label"},
		&cli.StringFlag{Name: "kubelet-dir", Value: "/var/lib/kubelet/device-plugins", EnvVars: envVar("kubelet-dir"), Usage: "folder of kubelet.sock and the plugin's sockets"},
		&cli.StringFlag{Name: "cdi-dir", Value: "/var/run/cdi", EnvVars: envVar("cdi-dir"), Usage: "where the spec whose names the plugin hands out is written (" + cdi.DefaultSpecName + ")"},
		&cli.StringFlag{Name: "simulate", EnvVars: envVar("simulate"), Usage: "describe a simulated host instead of asking NVML: an embedded profile (" + strings.Join(inventory.Profiles(), ", ") + ") or a profile file"},
		&cli.StringFlag{Name: "driver-root", EnvVars: envVar("driver-root"), Usage: "where the driver's files are installed (default: config [cdi] driver-root, /)"},
		&cli.StringFlag{Name: "dev-root", EnvVars: envVar("dev-root"), Usage: "where /dev and /proc are (default: config [cdi] dev-root, else the driver root)"},
		&cli.StringFlag{Name: "host-driver-root", EnvVars: envVar("host-driver-root"), Usage: "where the host has the driver root, for the spec's mounts when the plugin sees it elsewhere (in a container: --driver-root /driver-root --host-driver-root /)"},
		&cli.StringSliceFlag{Name: "library-search-path", EnvVars: envVar("library-search-path"), Usage: "a folder under the driver root holding the driver's libraries when no ld.so.cache lists them, such as GKE's /home/kubernetes/bin/nvidia/lib64 (repeatable, or comma-separated in the variable; default: config [cdi] library-search-paths)"},
		&cli.StringFlag{Name: "driver-store", EnvVars: envVar("driver-store"), Usage: "make the driver folder in `DIR`, a host folder mounted at the same path, where its hard links cannot be made under the driver root (a read-only one): copies of the driver's files, cloned where the file system can (default: config [cdi] driver-store)"},
		&cli.StringFlag{Name: "labels-dir", EnvVars: envVar("labels-dir"), Usage: "also write the node's GPU labels as a Node Feature Discovery feature file in `DIR` (its features.d), at start and at every config change"},
		&cli.StringFlag{Name: "hook-dir", EnvVars: envVar("hook-dir"), Usage: "copy the gpuctk-hook beside this binary into `DIR` (a host folder mounted at the same path) and have the spec call it there: for a node where gpuctk runs only from its image"},
		&cli.DurationFlag{Name: "xid-recovery", Value: 10 * time.Minute, EnvVars: envVar("xid-recovery"), Usage: "how long a device stays Unhealthy after its last critical XID event (0: until the plugin restarts)"},
		&cli.DurationFlag{Name: "health-interval", Value: 10 * time.Second, EnvVars: envVar("health-interval"), Usage: "how often device nodes and MPS daemons are checked"},
	}
}

// load reads the configuration and the host, as `gpuctk cdi generate`
// does, and resolves what to advertise; it runs at start and at every
// configuration change.
func load(c *cli.Context, log *slog.Logger) (*deviceplugin.State, error) {
	cfg, name, warnings, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if name != "" {
		log.Info("node configuration", "name", name, "file", cfg.Path)
	}
	for _, w := range warnings {
		log.Warn("NVIDIA device plugin config: "+w, "file", cfg.Path)
	}
	set := map[string]string{}
	for _, name := range []string{"driver-root", "dev-root", "host-driver-root", "driver-store"} {
		if c.IsSet(name) {
			set[name] = c.String(name)
		}
	}
	if c.IsSet("library-search-path") {
		set["library-search-path"] = strings.Join(c.StringSlice("library-search-path"), ",")
	}
	if dir := c.String("hook-dir"); dir != "" {
		set["hook-path"] = filepath.Join(dir, "gpuctk-hook")
	}
	if len(set) > 0 {
		if err := cfg.Override(set); err != nil {
			return nil, err
		}
	}
	n, err := nodespec.Load(cfg, c.String("simulate"), c.IsSet("driver-root") || c.IsSet("dev-root"), log)
	if err != nil {
		return nil, err
	}
	offered := n.Set
	// Resolved before anything is written: a configuration the plugin
	// refuses leaves the last good one's mount points and labels.
	st, err := deviceplugin.NewState(cfg, offered, n.Spec, n.Kind, n.Summary.Capabilities, n.Simulated)
	if err != nil {
		return nil, err
	}
	if err := st.CheckSockets(c.String("kubelet-dir")); err != nil {
		return nil, err
	}
	// The spec it writes is one runtimes use (see mps.MountPoints); a
	// simulated host makes nothing in the real host's state folders.
	simulated := c.String("simulate") != ""
	if !simulated || !config.IsHostState(cfg.MPS.StateRoot) {
		if err := mps.MountPoints(offered.MPS()); err != nil {
			return nil, err
		}
	}
	if simulated && config.IsHostState(cfg.Runtime.CacheDir) {
		st.Runtime = nil // no cache entries filled
	}
	if dir := c.String("labels-dir"); dir != "" {
		l, err := labels.For(offered, cfg.Kubernetes)
		if err != nil {
			return nil, err
		}
		if _, err := l.Write(dir); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// installHook copies the gpuctk-hook that sits beside this binary (in the
// image, /usr/bin) into dir, atomically: the spec the plugin writes is run
// by the host's runtime, which needs the hook on the host.
func installHook(dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	src := filepath.Join(filepath.Dir(exe), "gpuctk-hook")
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("--hook-dir: %w: the hook must be beside gpuctk-device-plugin", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--hook-dir: %w", err)
	}
	// The copy's path is the plugin's own: whatever else appeared there
	// is replaced, never followed.
	if _, err := atomicfile.Reclaim(filepath.Join(dir, "gpuctk-hook"), data, 0o755); err != nil {
		return fmt.Errorf("--hook-dir: %w", err)
	}
	return nil
}

// watchXIDs starts watching the GPUs' XID events through NVML, on a real
// host only: a simulated one has no events.
func watchXIDs(c *cli.Context) (<-chan inventory.XIDEvent, error) {
	if c.String("simulate") != "" {
		return nil, nil
	}
	cfg, _, _, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	root, paths := cfg.CDI.DriverRoot, cfg.CDI.LibrarySearchPaths
	if c.IsSet("driver-root") {
		root = c.String("driver-root")
	}
	if c.IsSet("library-search-path") {
		paths = c.StringSlice("library-search-path")
	}
	return nvmlhost.WatchXIDs(c.Context, root, driver.WithLibrarySearchPaths(paths...))
}

// maxNameSize bounds the --config-name-file: a label value is at most 63
// bytes.
const maxNameSize = 4096

// configFile returns the configuration file of this node, and its name
// among --config-dir's ("" without --config-dir): the name
// --config-name-file holds, else --config-default, else, as NVIDIA's
// config manager falls back, a configuration named "default", else the
// only one; with none of those, the defaults (path "").
func configFile(c *cli.Context) (path, name string, err error) {
	dir := c.String("config-dir")
	if dir == "" {
		for _, f := range []string{"config-default", "config-name-file"} {
			if c.IsSet(f) {
				return "", "", fmt.Errorf("--%s: needs --config-dir, the folder of configurations it chooses from", f)
			}
		}
		return c.String("config"), "", nil
	}
	if c.IsSet("config") {
		return "", "", fmt.Errorf("--config and --config-dir: give one (--config-dir chooses this node's file)")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", fmt.Errorf("--config-dir: %w", err)
	}
	files := map[string]string{} // name -> file
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || e.IsDir() {
			continue // a ConfigMap volume's ..data and timestamped folders
		}
		files[strings.TrimSuffix(n, ".toml")] = filepath.Join(dir, n)
	}
	why := ""
	if f := c.String("config-name-file"); f != "" {
		data, err := readfile.Limited(f, maxNameSize)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return "", "", fmt.Errorf("--config-name-file: %w", err)
		default:
			name, why = strings.TrimSpace(string(data)), "named by "+f
		}
	}
	if name == "" && c.String("config-default") != "" {
		name, why = c.String("config-default"), "--config-default"
	}
	if name == "" {
		if _, ok := files["default"]; ok {
			name = "default"
		} else if len(files) == 1 {
			for n := range files {
				name = n
			}
		} else {
			return "", "", nil // the defaults, as NVIDIA's empty fallback
		}
		why = "the fallback"
	}
	path, ok := files[name]
	if !ok {
		return "", "", fmt.Errorf("configuration %q (%s) is not in --config-dir %s (it has: %s): add it to the ConfigMap, or fix the node's nvidia.com/device-plugin.config label",
			name, why, dir, strings.Join(slices.Sorted(maps.Keys(files)), ", "))
	}
	return path, name, nil
}

// configWatch says which files' changes reload the plugin: --config, or
// every file of --config-dir and the --config-name-file.
func configWatch(c *cli.Context) []deviceplugin.Option {
	dir := c.String("config-dir")
	if dir == "" {
		return []deviceplugin.Option{deviceplugin.WithConfigPath(c.String("config"))}
	}
	opts := []deviceplugin.Option{deviceplugin.WithConfigDir(dir)}
	if f := c.String("config-name-file"); f != "" {
		opts = append(opts, deviceplugin.WithConfigPath(f))
	}
	return opts
}

// loadConfig reads this node's configuration (configFile): gpuctk's, or
// an NVIDIA device plugin config, converted (nvconfig.Load), as the
// ConfigMap moved from NVIDIA's plugin holds. It returns the name among
// --config-dir's and the conversion's warnings.
func loadConfig(c *cli.Context) (*config.Config, string, []string, error) {
	path, name, err := configFile(c)
	if err != nil {
		return nil, "", nil, err
	}
	cfg, warnings, err := nvconfig.LoadWatched(path, c.IsSet("config") || name != "")
	return cfg, name, warnings, err
}

// followNodeLabel starts copying the node's configuration label into
// --config-name-file when --node-name is given, and waits for the first
// copy.
func followNodeLabel(c *cli.Context, log *slog.Logger) error {
	node := c.String("node-name")
	if node == "" {
		return nil
	}
	file := c.String("config-name-file")
	if c.String("config-dir") == "" || file == "" {
		return fmt.Errorf("--node-name: needs --config-dir and --config-name-file, where the label's value is written")
	}
	if d := c.Duration("node-label-interval"); d <= 0 {
		return fmt.Errorf("--node-label-interval %v: must be more than 0", d)
	}
	n, err := newNodeLabel(node, c.String("node-config-label"), c.String("service-account-dir"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("--config-name-file: %w", err)
	}
	ready := make(chan struct{})
	go n.follow(c.Context, file, c.Duration("node-label-interval"), log, ready)
	<-ready
	return nil
}
