package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/deviceplugin"
	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/nodespec"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/labels"
	"github.com/gpuctk/gpuctk/mps"
)

// envVar is the environment variable a flag reads: GPUCTK_KUBELET_DIR for
// --kubelet-dir.
func envVar(flag string) []string {
	return []string{"GPUCTK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Value: config.DefaultPath, EnvVars: envVar("config"), Usage: "configuration file, [kubernetes] included; reloaded when it changes"},
		&cli.StringFlag{Name: "kubelet-dir", Value: "/var/lib/kubelet/device-plugins", EnvVars: envVar("kubelet-dir"), Usage: "folder of kubelet.sock and the plugin's sockets"},
		&cli.StringFlag{Name: "cdi-dir", Value: "/var/run/cdi", EnvVars: envVar("cdi-dir"), Usage: "where the spec whose names the plugin hands out is written (" + cdi.DefaultSpecName + ")"},
		&cli.StringFlag{Name: "simulate", EnvVars: envVar("simulate"), Usage: "describe a simulated host instead of asking NVML: an embedded profile (" + strings.Join(inventory.Profiles(), ", ") + ") or a profile file"},
		&cli.StringFlag{Name: "driver-root", EnvVars: envVar("driver-root"), Usage: "where the driver's files are installed (default: config [cdi] driver-root, /)"},
		&cli.StringFlag{Name: "dev-root", EnvVars: envVar("dev-root"), Usage: "where /dev and /proc are (default: config [cdi] dev-root, else the driver root)"},
		&cli.StringFlag{Name: "host-driver-root", EnvVars: envVar("host-driver-root"), Usage: "where the host has the driver root, for the spec's mounts when the plugin sees it elsewhere (in a container: --driver-root /driver-root --host-driver-root /)"},
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
	set := map[string]string{}
	for _, name := range []string{"driver-root", "dev-root", "host-driver-root"} {
		if c.IsSet(name) {
			set[name] = c.String(name)
		}
	}
	if dir := c.String("hook-dir"); dir != "" {
		set["hook-path"] = filepath.Join(dir, "gpuctk-hook")
	}
	cfg, err := nodespec.Config(c.String("config"), c.IsSet("config"), set)
	if err != nil {
		return nil, err
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
	// The spec it writes is one runtimes use (see mps.MountPoints).
	if err := mps.MountPoints(offered.MPS()); err != nil {
		return nil, err
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
	if err := atomicfile.WriteFile(filepath.Join(dir, "gpuctk-hook"), data, 0o755); err != nil {
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
	cfg, err := config.Load(c.String("config"), c.IsSet("config"))
	if err != nil {
		return nil, err
	}
	root := cfg.CDI.DriverRoot
	if c.IsSet("driver-root") {
		root = c.String("driver-root")
	}
	return nvmlhost.WatchXIDs(c.Context, root)
}
