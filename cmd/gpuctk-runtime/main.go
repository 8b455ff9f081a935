// Command gpuctk-runtime is a drop-in low-level OCI runtime: it injects the
// CDI devices a container asks for on create, then execs runc.
package main

import (
	"fmt"
	"os"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/version"
	"github.com/gpuctk/gpuctk/runtime"
)

// configEnv names the variable that points gpuctk-runtime at a
// configuration file other than config.DefaultPath, which must then exist.
const configEnv = "GPUCTK_CONFIG"

func main() {
	args := os.Args[1:]
	if runtime.VersionRequested(args) {
		// Ours first; the low-level runtime, exec'd with the same
		// arguments, prints its own after.
		fmt.Printf("gpuctk-runtime version %s\n", version.Version)
	}
	var cfg *config.Config
	var err error
	if p := os.Getenv(configEnv); p != "" {
		cfg, err = config.Load(p, true)
	} else {
		cfg, err = config.Load(config.DefaultPath, false)
	}
	opts := []runtime.Option{runtime.WithConfig(cfg)}
	if err != nil {
		opts = []runtime.Option{runtime.WithConfigError(err)}
	}
	// runc's own --debug passes through and also sets ours; --quiet is
	// no runc flag, so the level comes from the environment.
	level, lerr := runtime.LogLevelFromEnv(os.Getenv)
	if lerr != nil {
		fmt.Fprintln(os.Stderr, "gpuctk-runtime: warning:", lerr)
	}
	opts = append(opts, runtime.WithLogLevel(level))
	if err := runtime.New(opts...).Run(args); err != nil {
		fmt.Fprintln(os.Stderr, "gpuctk-runtime:", err)
		os.Exit(1)
	}
}
