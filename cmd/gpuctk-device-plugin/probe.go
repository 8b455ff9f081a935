package main

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/deviceplugin"
)

// probeCommand is the container's liveness and readiness probe: an exec
// probe needs no port and no shell in the image.
func probeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "exit 0 when every socket of the plugin's in --kubelet-dir answers (with --ready: and one is there)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kubelet-dir", Value: "/var/lib/kubelet/device-plugins", EnvVars: envVar("kubelet-dir"), Usage: "folder of the plugin's sockets"},
			&cli.BoolFlag{Name: "ready", Usage: "also fail when no resource is served yet"},
			&cli.DurationFlag{Name: "timeout", Value: 3 * time.Second, Usage: "how long each socket has to answer"},
		},
		Action: func(c *cli.Context) error {
			return deviceplugin.Probe(c.Context, c.String("kubelet-dir"), c.Bool("ready"), c.Duration("timeout"))
		},
	}
}
