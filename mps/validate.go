package mps

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/gpuctk/gpuctk/driver"
)

// Client limits of an MPS server, from NVIDIA's MPS documentation.
const (
	maxClients         = 48 // Volta and newer
	maxClientsPreVolta = 16
)

// MaxReplicas returns the most MPS clients, hence replicas, a device takes.
//
// A MIG instance takes at most one client per SM as well. The server
// limits a client to whole SMs, not fractions of them: with more clients
// than SMs, the default share (100/replicas percent) is less than one SM
// and the limit no longer separates clients. Scaling 48 by the instance's fraction of the full GPU
// would cap a 1g.10gb slice of an H100 at 5 clients though it has 16 SMs,
// which is stricter than the hardware needs.
func (d Device) MaxReplicas() int {
	limit := maxClients
	if d.ComputeMajor > 0 && d.ComputeMajor < 7 {
		limit = maxClientsPreVolta
	}
	if d.SMCount > 0 && d.SMCount < limit {
		limit = d.SMCount
	}
	return limit
}

// Validate checks every MPS-shared device against the rules of MPS and
// checks that the control daemon binary is under the driver root. It
// returns every failure, one line each, naming the device and the rule.
func Validate(devs []Device, driverRoot string) error {
	var errs []error
	for _, d := range devs {
		if !d.IsMPS() {
			continue
		}
		errs = append(errs, d.Validate())
	}
	if _, err := FindControl(driverRoot); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Validate checks the device against the rules of MPS (replicas, thread
// percentage, memory limit) and returns every failure, one line each.
func (d Device) Validate() error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("MPS device %s: "+format, append([]any{d}, args...)...))
	}
	r := d.Sharing.Replicas
	switch most := d.MaxReplicas(); {
	case r < 2:
		fail("replicas is %d: MPS sharing needs from 2 to %d replicas", r, most)
	case r > most:
		why := "the most clients an MPS server takes"
		if d.ComputeMajor > 0 && d.ComputeMajor < 7 {
			why = "the most clients an MPS server takes on a GPU older than Volta"
		}
		if d.SMCount > 0 && d.SMCount == most {
			why = fmt.Sprintf("one client per SM of this MIG instance, which has %d", d.SMCount)
		}
		fail("replicas is %d: at most %d (%s)", r, most, why)
	}

	if p := d.ThreadPercentage; p < 1 || p > 100 {
		fail("active-thread-percentage is %d: it must be from 1 to 100", p)
	}
	switch limit := d.PinnedMemoryMiB; {
	case d.MemoryMiB == 0 && d.Sharing.PinnedMemoryLimit == 0:
		fail("its memory size is unknown: set pinned-memory-limit")
	case limit < 1:
		fail("pinned-memory-limit is %d bytes: it must be at least 1MiB", uint64(d.Sharing.PinnedMemoryLimit))
	case d.MemoryMiB > 0 && limit > d.MemoryMiB:
		fail("pinned-memory-limit is %dMiB: the device has only %dMiB", limit, d.MemoryMiB)
	}
	return errors.Join(errs...)
}

// controlName is the MPS control daemon's binary.
const controlName = "nvidia-cuda-mps-control"

// FindControl returns the path of nvidia-cuda-mps-control under the
// driver root.
func FindControl(driverRoot string) (string, error) {
	p, err := driver.FindBinary(driverRoot, controlName)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: install the driver's MPS binaries or pass the right --driver-root", err)
	}
	return p, err
}
