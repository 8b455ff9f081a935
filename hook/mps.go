package hook

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

func init() { subcommands["mps-check"] = checkMPS }

// checkMPS is the mps-check subcommand: --pipe-dir DIR --uuid UUID, the
// host folder of an MPS daemon's control socket and its device. It fails
// when nothing accepts a connection on DIR/control, so the container is
// refused with a message that says what to do, rather than started to fail
// later with an opaque CUDA RPC error. A socket file alone proves nothing:
// a daemon that died leaves it behind. createContainer hooks run in the
// runtime's mount namespace, so DIR is the host's.
func checkMPS(e *Env, args []string) error {
	f, err := flags(e, args, "pipe-dir", "uuid")
	if err != nil {
		return err
	}
	if len(f["pipe-dir"]) != 1 || len(f["uuid"]) != 1 {
		return errors.New("--pipe-dir and --uuid are each needed once")
	}
	uuid := f["uuid"][0]
	c, err := net.DialTimeout("unix", filepath.Join(f["pipe-dir"][0], "control"), 2*time.Second)
	if err != nil {
		return fmt.Errorf("MPS daemon for %s is not running: run `gpuctk mps start` or start gpuctk-mps.service", uuid)
	}
	return c.Close()
}
