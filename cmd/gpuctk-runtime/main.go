// Command gpuctk-runtime is a drop-in low-level OCI runtime: it injects the
// CDI devices a container asks for on create, then execs runc.
package main

import (
	"fmt"
	"os"

	"github.com/gpuctk/gpuctk/runtime"
)

func main() {
	if err := runtime.Main(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpuctk-runtime:", err)
		os.Exit(1)
	}
}
