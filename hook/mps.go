package hook

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gpuctk/gpuctk/mps/peer"
)

func init() { subcommands["mps-check"] = checkMPS }

// checkMPS is the mps-check subcommand: --pipe-dir DIR --uuid UUID, the
// host folder of an MPS daemon's control socket and its device.
func checkMPS(e *Env, args []string) error {
	f, err := flags(e, args, "pipe-dir", "uuid")
	if err != nil {
		return err
	}
	if len(f["pipe-dir"]) != 1 || len(f["uuid"]) != 1 {
		return errors.New("--pipe-dir and --uuid are each needed once")
	}
	return CheckMPS(f["pipe-dir"][0], f["uuid"][0])
}

// CheckMPS fails unless the MPS daemon gpuctk started for the device uuid
// accepts a connection on pipeDir/control, so the container is refused with
// a message that says what to do rather than started to fail later with an
// opaque CUDA RPC error. createContainer hooks run in the runtime's mount
// namespace, so pipeDir is the host's.
//
// The pipe folder is writable by every replica container, so a socket
// there proves nothing: a daemon that died leaves it behind, and a tenant
// can plant one of its own (or a link to another socket). The listener
// must be the daemon recorded in pipeDir/../device.json, which no
// container can write (see package peer).
func CheckMPS(pipeDir, uuid string) error {
	notRunning := fmt.Errorf("MPS daemon for %s is not running: run `gpuctk mps start` or start gpuctk-mps.service", uuid)
	rec, err := peer.ReadRecord(filepath.Join(filepath.Dir(pipeDir), "device.json"))
	if err != nil {
		return notRunning
	}
	c, err := peer.Dial(filepath.Join(pipeDir, "control"), rec, 2*time.Second)
	if err != nil {
		return notRunning
	}
	return c.Close()
}
