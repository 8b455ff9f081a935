// Command gpuctk-runtime is a drop-in low-level OCI runtime: it injects the
// CDI devices a container asks for on create, then execs runc.
package main

import (
	"fmt"
	"os"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/runtime"
)

func main() {
	cfg, err := config.LoadEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuctk-runtime:", err)
		os.Exit(1)
	}
	if err := runtime.New(runtime.WithConfig(cfg)).Run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpuctk-runtime:", err)
		os.Exit(1)
	}
}
