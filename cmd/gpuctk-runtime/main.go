// Command gpuctk-runtime is a drop-in low-level OCI runtime: it injects the
// CDI devices a container asks for on create, then execs runc.
package main

import (
	"fmt"
	"os"

	"github.com/gpuctk/gpuctk/runtime"
)

func main() {
	s, err := runtime.LoadSettings()
	if err == nil {
		err = runtime.New(runtime.WithSettings(s)).Run(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuctk-runtime:", err)
		os.Exit(1)
	}
}
