package hook

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/gpuctk/gpuctk/mps/peer"
)

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
	if err := peer.Check(filepath.Join(pipeDir, "control"), rec, 2*time.Second); err != nil {
		return notRunning
	}
	return nil
}
