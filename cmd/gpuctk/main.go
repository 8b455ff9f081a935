// Command gpuctk generates CDI specs for NVIDIA GPUs, manages MPS daemons
// and configures container runtimes.
package main

import (
	"fmt"
	"os"

	"github.com/gpuctk/gpuctk/internal/cli"
)

func main() {
	if err := cli.App().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "gpuctk:", err)
		os.Exit(1)
	}
}
