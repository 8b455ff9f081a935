// Command gpuctk-device-plugin advertises a node's GPUs, MIG devices and
// replicas to the kubelet and hands them to pods as CDI devices.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/deviceplugin"
	"github.com/gpuctk/gpuctk/internal/version"
)

func main() {
	app := &cli.App{
		Name:    "gpuctk-device-plugin",
		Usage:   "Kubernetes device plugin for NVIDIA GPUs through CDI",
		Version: version.Version,
		Flags:   flags(),
		Action:  run,
		Commands: []*cli.Command{probeCommand(), {
			Name:   "man",
			Usage:  "print the gpuctk-device-plugin(8) man page (for make man)",
			Hidden: true,
			Action: func(c *cli.Context) error {
				page, err := c.App.ToManWithSection(8)
				if err == nil {
					_, err = fmt.Fprint(c.App.Writer, page)
				}
				return err
			},
		}},
		HideHelpCommand: true,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "gpuctk-device-plugin:", err)
		os.Exit(1)
	}
}

func run(c *cli.Context) error {
	// Flags after a word would be read as arguments, and ignored.
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: the plugin takes flags only", c.Args().First())
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if dir := c.String("hook-dir"); dir != "" {
		if err := installHook(dir); err != nil {
			return err
		}
		log.Info("installed gpuctk-hook", "dir", dir)
	}
	opts := []deviceplugin.Option{
		deviceplugin.WithKubeletDir(c.String("kubelet-dir")),
		deviceplugin.WithCDIDir(c.String("cdi-dir")),
		deviceplugin.WithHealthInterval(c.Duration("health-interval")),
		deviceplugin.WithXIDRecovery(c.Duration("xid-recovery")),
		deviceplugin.WithLogger(log),
	}
	opts = append(opts, configWatch(c)...)
	c.Context = ctx
	if err := followNodeLabel(c, log); err != nil {
		return err
	}
	// Without XID events the other health checks still run: say so, and
	// serve, as NVIDIA's plugin does when the driver cannot deliver them.
	if xids, err := watchXIDs(c); err != nil {
		log.Warn("XID health checks off", "err", err)
	} else if xids != nil {
		opts = append(opts, deviceplugin.WithXIDEvents(xids))
	}
	p := deviceplugin.New(func() (*deviceplugin.State, error) { return load(c, log) }, opts...)
	return p.Run(ctx)
}
