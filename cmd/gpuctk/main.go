// Command gpuctk generates CDI specs for NVIDIA GPUs, manages MPS daemons
// and configures container runtimes.
package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/internal/version"
)

func main() {
	app := &cli.App{
		Name:                 "gpuctk",
		Usage:                "share NVIDIA GPUs with containers through CDI",
		Version:              version.Version,
		Commands:             []*cli.Command{cdiCommand(), mpsCommand(), runtimeCommand(), configCommand(), labelsCommand(), infoCommand(), migCommand(), completionCommand(), manCommand()},
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		Flags:                logFlags(),
		Before:               quietBefore,
	}
	strict(app)
	if err := app.Run(os.Args); err != nil {
		os.Exit(report(os.Stderr, err))
	}
}
