// Command gpuctk-dra is gpuctk's Dynamic Resource Allocation driver: it
// publishes a node's GPUs, MIG devices and replicas in ResourceSlices and
// prepares the ResourceClaims allocated to them as CDI devices.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/internal/version"
)

func main() {
	app := &cli.App{
		Name:            "gpuctk-dra",
		Usage:           "Kubernetes DRA driver for NVIDIA GPUs through CDI",
		Version:         version.Version,
		Flags:           flags(),
		Action:          run,
		HideHelpCommand: true,
		Commands: []*cli.Command{{
			Name:   "man",
			Usage:  "print the gpuctk-dra(8) man page (for make man)",
			Hidden: true,
			Action: func(c *cli.Context) error {
				page, err := c.App.ToManWithSection(8)
				if err == nil {
					_, err = fmt.Fprint(c.App.Writer, page)
				}
				return err
			},
		}},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "gpuctk-dra:", err)
		os.Exit(1)
	}
}
