// Command gpuctk-hook is the createContainer hook of gpuctk's CDI specs:
// it parses its command line and runs package hook's operations.
package main

import (
	"os"

	"github.com/gpuctk/gpuctk/hook"
	"github.com/gpuctk/gpuctk/internal/version"
)

func main() {
	// The ldconfig child is this program re-executed to set its limits.
	hook.MainIfExecLimited(os.Args[1:])
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr, version.Version))
}
