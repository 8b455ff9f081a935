package hook

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"
)

// checkMPS is the mps-check subcommand: args are what follows the
// subcommand's name, --pipe-dir DIR --uuid UUID. It fails when the MPS
// control daemon of that device does not accept a connection on DIR's
// control socket, so the container is refused with a message that says
// what to do rather than started to fail later with a CUDA RPC error. A
// socket file alone proves nothing: a daemon that died leaves it behind.
func checkMPS(args []string) error {
	fs := flag.NewFlagSet("mps-check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pipeDir := fs.String("pipe-dir", "", "the daemon's pipe folder on the host")
	uuid := fs.String("uuid", "", "the UUID of the MPS-shared device")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("mps-check: %w", err)
	}
	if *pipeDir == "" || *uuid == "" {
		return errors.New("mps-check: --pipe-dir and --uuid are required")
	}
	c, err := net.DialTimeout("unix", filepath.Join(*pipeDir, "control"), 2*time.Second)
	if err != nil {
		return fmt.Errorf("MPS daemon for %s is not running: run `gpuctk mps start` or start gpuctk-mps.service", *uuid)
	}
	return c.Close()
}
