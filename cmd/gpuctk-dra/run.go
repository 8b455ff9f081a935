package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/dra"
	"github.com/gpuctk/gpuctk/internal/nodespec"
	"github.com/gpuctk/gpuctk/inventory"
)

// envVar is the environment variable a flag reads: GPUCTK_CDI_DIR for
// --cdi-dir, as the device plugin's.
func envVar(flag string) []string {
	return []string{"GPUCTK_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Value: config.DefaultPath, EnvVars: envVar("config"), Usage: "configuration file, [dra] included; reloaded when it changes"},
		&cli.StringFlag{Name: "cdi-dir", Value: "/var/run/cdi", EnvVars: envVar("cdi-dir"), Usage: "where the spec whose names prepared claims get is written (" + cdi.DefaultSpecName + ")"},
		&cli.StringFlag{Name: "simulate", EnvVars: envVar("simulate"), Usage: "describe a simulated host instead of asking NVML: an embedded profile (" + strings.Join(inventory.Profiles(), ", ") + ") or a profile file"},
		&cli.StringFlag{Name: "driver-root", EnvVars: envVar("driver-root"), Usage: "where the driver's files are installed (default: config [cdi] driver-root, /)"},
		&cli.StringFlag{Name: "dev-root", EnvVars: envVar("dev-root"), Usage: "where /dev and /proc are (default: config [cdi] dev-root, else the driver root)"},
		&cli.StringFlag{Name: "host-driver-root", EnvVars: envVar("host-driver-root"), Usage: "where the host has the driver root, for the spec's mounts when the driver sees it elsewhere"},
		&cli.StringFlag{Name: "kubeconfig", EnvVars: append(envVar("kubeconfig"), "KUBECONFIG"), Usage: "kubeconfig file of the API server (default: the pod's service account)"},
		&cli.StringFlag{Name: "node-name", EnvVars: append(envVar("node-name"), "NODE_NAME"), Usage: "this node's name: its ResourceSlices' pool"},
		&cli.StringFlag{Name: "plugin-dir", EnvVars: envVar("plugin-dir"), Usage: "folder of the DRA socket and the checkpoint (default: /var/lib/kubelet/plugins/DRIVER-NAME)"},
		&cli.StringFlag{Name: "registrar-dir", Value: kubeletplugin.KubeletRegistryDir, EnvVars: envVar("registrar-dir"), Usage: "the kubelet's plugin registration folder"},
		&cli.StringFlag{Name: "device-plugin-dir", Value: "/var/lib/kubelet/device-plugins", EnvVars: envVar("device-plugin-dir"), Usage: "the kubelet's device-plugins folder: the driver refuses to start while gpuctk-device-plugin serves there (\"\" checks nothing)"},
	}
}

func run(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: the driver takes flags only", c.Args().First())
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	set := map[string]string{}
	for _, name := range []string{"driver-root", "dev-root", "host-driver-root"} {
		if c.IsSet(name) {
			set[name] = c.String(name)
		}
	}
	load := func() (*nodespec.Node, error) {
		cfg, err := nodespec.Config(c.String("config"), c.IsSet("config"), set)
		if err != nil {
			return nil, err
		}
		return nodespec.Load(cfg, c.String("simulate"), c.IsSet("driver-root") || c.IsSet("dev-root"), log)
	}
	// The name is read once: the kubelet knows the driver by it.
	cfg, err := nodespec.Config(c.String("config"), c.IsSet("config"), set)
	if err != nil {
		return err
	}
	client, err := kubeClient(c.String("kubeconfig"))
	if err != nil {
		return err
	}
	p := dra.New(cfg.DRA.DriverName, c.String("node-name"), client, load,
		dra.WithCDIDir(c.String("cdi-dir")), dra.WithPluginDir(c.String("plugin-dir")),
		dra.WithRegistrarDir(c.String("registrar-dir")), dra.WithDevicePluginDir(c.String("device-plugin-dir")),
		dra.WithConfigPath(c.String("config")), dra.WithLogger(log))
	return p.Run(ctx)
}

// kubeClient connects through a kubeconfig file, or without one as the
// pod's service account.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("API server: %w (give --kubeconfig outside a pod)", err)
	}
	return kubernetes.NewForConfig(rc)
}
