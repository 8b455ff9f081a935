// Command gpuctk-hook is the createContainer hook of gpuctk's CDI specs.
package main

import (
	"os"

	"github.com/gpuctk/gpuctk/hook"
	"github.com/gpuctk/gpuctk/internal/version"
)

func main() {
	hook.Version = version.Version
	os.Exit(hook.Main(os.Args[1:], os.Stdin, os.Stderr))
}
