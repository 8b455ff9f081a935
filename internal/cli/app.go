package cli

import (
	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/internal/version"
)

// commands are added by the files of this package, one per command group.
var commands []*cli.Command

// App returns the gpuctk command line.
func App() *cli.App {
	return &cli.App{
		Name:                 "gpuctk",
		Usage:                "share NVIDIA GPUs with containers through CDI",
		Version:              version.Version,
		Commands:             commands,
		EnableBashCompletion: true,
		HideHelpCommand:      true,
	}
}
