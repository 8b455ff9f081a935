package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Env is what an operation runs with: the OCI state on Stdin (read on
// first use) and Stderr for warnings.
type Env struct {
	Stdin  io.Reader
	Stderr io.Writer
	// Debug adds what the hook does to Stderr; Quiet leaves only
	// failures there. Runtimes keep a hook's stderr in their log.
	Debug, Quiet bool
	state        *state
}

// debugf writes a debug line when asked for.
func (e *Env) debugf(format string, args ...any) {
	if e.Debug {
		fmt.Fprintf(e.Stderr, "gpuctk-hook: debug: "+format+"\n", args...)
	}
}

type state struct {
	Bundle string `json:"bundle"`
	Pid    int    `json:"pid"`
	ID     string `json:"id"`
}

// Container is what the hook needs of the bundle's config.json.
type Container struct {
	// Root is the host path of the container's root file system.
	Root string
	// UID and GID own what the hook creates in Root: the host IDs that
	// the container's root maps to, 0 without a user namespace.
	UID, GID int
}

type idMapping struct {
	ContainerID uint32 `json:"containerID"`
	HostID      uint32 `json:"hostID"`
	Size        uint32 `json:"size"`
}

// ContainerRoot returns the host path of the container's root file
// system: the bundle's config.json root.path, relative to the bundle.
func (e *Env) ContainerRoot() (string, error) {
	c, err := e.Container()
	return c.Root, err
}

// Container reads the OCI state on stdin (once) and the bundle's
// config.json: the root path and, for a container with a user namespace,
// the host IDs of its root.
func (e *Env) Container() (Container, error) {
	if e.state == nil {
		var s state
		if err := json.NewDecoder(io.LimitReader(e.Stdin, 1<<20)).Decode(&s); err != nil {
			return Container{}, fmt.Errorf("reading the OCI state on stdin: %w", err)
		}
		if s.Bundle == "" {
			return Container{}, errors.New("the OCI state on stdin has no bundle")
		}
		e.state = &s
	}
	f, err := os.Open(filepath.Join(e.state.Bundle, "config.json"))
	if err != nil {
		return Container{}, fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	var cfg struct {
		Root struct {
			Path string `json:"path"`
		} `json:"root"`
		Linux struct {
			UIDMappings []idMapping `json:"uidMappings"`
			GIDMappings []idMapping `json:"gidMappings"`
		} `json:"linux"`
	}
	if err := json.NewDecoder(io.LimitReader(f, 64<<20)).Decode(&cfg); err != nil {
		return Container{}, fmt.Errorf("bundle %s/config.json: %w", e.state.Bundle, err)
	}
	if cfg.Root.Path == "" {
		return Container{}, fmt.Errorf("bundle %s/config.json has no root.path", e.state.Bundle)
	}
	c := Container{Root: cfg.Root.Path}
	// runc and crun run createContainer hooks inside the container's user
	// namespace, as its root: what the hook creates is then the
	// container's already, and the host IDs do not exist there.
	if (len(cfg.Linux.UIDMappings) > 0 || len(cfg.Linux.GIDMappings) > 0) && inInitialUserNS() {
		c.UID, c.GID = hostRoot(cfg.Linux.UIDMappings), hostRoot(cfg.Linux.GIDMappings)
	}
	if !filepath.IsAbs(c.Root) {
		c.Root = filepath.Join(e.state.Bundle, c.Root)
	}
	return c, nil
}

// inInitialUserNS reports whether the hook runs in the host's user
// namespace, whose uid_map maps every ID to itself.
func inInitialUserNS() bool {
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true
	}
	return strings.Join(strings.Fields(string(data)), " ") == "0 0 4294967295"
}

// hostRoot returns the host ID that container ID 0 maps to; 0 when there
// are no mappings or none covers 0 (files then show as the overflow ID
// inside, still readable).
func hostRoot(m []idMapping) int {
	for _, r := range m {
		if r.ContainerID == 0 && r.Size > 0 {
			return int(r.HostID)
		}
	}
	return 0
}
