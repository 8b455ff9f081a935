package hook

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpuctk/gpuctk/mps/peer"
)

// CheckMPSContainer checks the device's daemon as CheckMPS does, then
// refuses a container given MPS replicas of more than one device. Each
// replica binds its daemon's pipe folder at /tmp/nvidia-mps, so such a
// container would reach one daemon only (CDI keeps the last mount at a
// path), and its other devices' clients would hang or fail with an opaque
// CUDA error. The device plugin never gives a container two MPS replicas
// of one resource, but a pod may ask for two MPS resources, and CDI names
// may be given by hand. The replicas are told by their mps-check calls in
// config.json, one per device, each naming its pipe folder.
func (e *Env) CheckMPSContainer(pipeDir, uuid string) error {
	if err := CheckMPS(pipeDir, uuid); err != nil {
		return err
	}
	c, err := e.Container()
	if err != nil {
		return err
	}
	var cfg struct {
		Hooks struct {
			CreateContainer []struct {
				Args []string `json:"args"`
			} `json:"createContainer"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(c.config, &cfg); err != nil {
		return fmt.Errorf("bundle %s/config.json: %w", c.Bundle, err)
	}
	var pipes []string
	for _, h := range cfg.Hooks.CreateContainer {
		if len(h.Args) < 2 || h.Args[1] != peer.HookCommand {
			continue
		}
		for i, a := range h.Args[2:] {
			p, ok := strings.CutPrefix(a, "--pipe-dir=")
			if a == "--pipe-dir" && i+3 < len(h.Args) {
				p, ok = h.Args[i+3], true
			}
			if ok && !slices.Contains(pipes, filepath.Clean(p)) {
				pipes = append(pipes, filepath.Clean(p))
			}
		}
	}
	if len(pipes) > 1 {
		return fmt.Errorf("the container is given MPS replicas of %d devices, whose daemons' pipe folders (%s) are each bound at %s, where a client finds the one daemon it uses: give a container MPS replicas of one device only",
			len(pipes), strings.Join(pipes, ", "), peer.ContainerPipeDir)
	}
	return nil
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
	if err := peer.Check(filepath.Join(pipeDir, "control"), rec, 2*time.Second); err != nil {
		return notRunning
	}
	return nil
}
