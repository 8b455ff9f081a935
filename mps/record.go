package mps

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/offer"
)

// started returns the devices with a record in the state root.
func (m *Manager) started() ([]*offer.Share, error) {
	entries, err := os.ReadDir(m.stateRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("MPS state: %w", err)
	}
	var out []*offer.Share
	for _, e := range entries {
		data, err := os.ReadFile(m.recordPath(e.Name()))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("MPS state: %w", err)
		}
		var d *offer.Share
		if err := json.Unmarshal(data, &d); err != nil {
			return nil, fmt.Errorf("MPS state %s: %w", m.recordPath(e.Name()), err)
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *offer.Share) int {
		return cmp.Or(cmp.Compare(a.GPU.Index, b.GPU.Index), cmp.Compare(a.Ordinal, b.Ordinal))
	})
	return out, nil
}

func (m *Manager) recordPath(uuid string) string {
	return filepath.Join(m.stateRoot, uuid, "device.json")
}

// daemonRecord is what the state root keeps of a device while gpuctk runs
// a daemon for it: the device and, once known, the daemon's pid and mount
// namespace. It lives outside the pipe folder, where no container writes.
type daemonRecord struct {
	offer.Share
	PID int `json:"daemonPID,omitempty"`
	// MountNS is the inode number of the mount namespace gpuctk made for
	// the daemon (see inShmNamespace).
	MountNS uint64 `json:"daemonMountNS,omitempty"`
	// ControlInode is the inode of the daemon's control socket, once its
	// listener was checked: see peer.Record.
	ControlInode uint64 `json:"controlInode,omitempty"`
}

func (m *Manager) writeRecord(r daemonRecord) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(m.recordPath(r.UUID()), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("MPS state: %w", err)
	}
	return nil
}

func (m *Manager) readRecord(uuid string) (daemonRecord, error) {
	var r daemonRecord
	data, err := os.ReadFile(m.recordPath(uuid))
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(data, &r)
	return r, err
}
