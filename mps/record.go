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
	"github.com/gpuctk/gpuctk/internal/readfile"
	"github.com/gpuctk/gpuctk/offer"
)

// started returns the devices with a record in the state root. A record
// that cannot be read does not hide the others: it is one of broken, which
// says what to do about it.
func (m *Manager) started() (devs []*offer.Share, broken []error, err error) {
	entries, err := os.ReadDir(m.stateRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("MPS state: %w", err)
	}
	for _, e := range entries {
		rec, err := m.readRecord(e.Name())
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		// A record without its GPU ({} or "device": null) names no
		// device, and its UUID cannot even be asked.
		if err == nil && (rec.GPU == nil || rec.UUID() != e.Name()) {
			err = fmt.Errorf("it is not the record of device %s", e.Name())
		}
		if err != nil {
			path := m.recordPath(e.Name())
			broken = append(broken, fmt.Errorf("MPS state %s cannot be read (%w): its daemon, if one runs, is left alone and compute modes are not restored; "+
				"stop that daemon by hand, remove %s, then run `gpuctk mps stop` again", path, err, filepath.Dir(path)))
			continue
		}
		devs = append(devs, &rec.Share)
	}
	slices.SortFunc(devs, func(a, b *offer.Share) int {
		return cmp.Or(cmp.Compare(a.GPU.Index, b.GPU.Index), cmp.Compare(a.Ordinal, b.Ordinal))
	})
	return devs, broken, nil
}

// maxRecordSize bounds a device record: a few hundred bytes, written by
// gpuctk alone.
const maxRecordSize = 1 << 20

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

// readRecord reads the record of the device uuid, at most maxRecordSize
// bytes of it.
func (m *Manager) readRecord(uuid string) (daemonRecord, error) {
	var r daemonRecord
	data, err := readfile.Limited(m.recordPath(uuid), maxRecordSize)
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(data, &r)
	return r, err
}
