package offer

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/gpuctk/gpuctk/config"
)

// Client limits of an MPS server, from NVIDIA's MPS documentation.
const (
	maxClients         = 48 // Volta and newer
	maxClientsPreVolta = 16
)

// maxSocketPath is the longest path a unix socket address holds
// (sun_path is 108 bytes with its terminating NUL): past it the MPS daemon
// exits without a word.
const maxSocketPath = 107

// MaxReplicas returns the most MPS clients, hence replicas, a device takes.
//
// A MIG instance takes at most one client per SM as well. The server
// limits a client to whole SMs, not fractions of them: with more clients
// than SMs, the default share (100/replicas percent) is less than one SM
// and the limit no longer separates clients. Scaling 48 by the instance's
// fraction of the full GPU would cap a 1g.10gb slice of an H100 at 5
// clients though it has 16 SMs, which is stricter than the hardware needs.
func (s *Share) MaxReplicas() int {
	limit := maxClients
	if m := s.GPU.ComputeMajor(); m > 0 && m < 7 {
		limit = maxClientsPreVolta
	}
	if s.MIG != nil && s.MIG.SMCount > 0 && s.MIG.SMCount < limit {
		limit = s.MIG.SMCount
	}
	return limit
}

// checkMPS checks an MPS-shared device against the rules of MPS (replicas,
// thread percentage, memory limit, control socket path) and returns every
// failure, one line each, naming the device and the rule.
func checkMPS(s *Share, e *config.Sharing) error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: MPS device %s: "+format, append([]any{s.Origin, s}, args...)...))
	}
	r := s.Replicas
	if most := s.MaxReplicas(); r > most {
		why := "the most clients an MPS server takes"
		if m := s.GPU.ComputeMajor(); m > 0 && m < 7 {
			why = "the most clients an MPS server takes on a GPU older than Volta"
		}
		if s.MIG != nil && s.MIG.SMCount == most {
			why = fmt.Sprintf("one client per SM of this MIG instance, which has %d", s.MIG.SMCount)
		}
		fail("replicas is %d: at most %d (%s)", r, most, why)
	}
	if p := s.ThreadPercentage; p < 1 || p > 100 {
		fail("active-thread-percentage is %d: it must be from 1 to 100", p)
	}
	switch mem, limit := s.MemoryMiB(), s.PinnedMemoryMiB; {
	case mem == 0 && e.PinnedMemoryLimit == 0:
		fail("its memory size is unknown: set pinned-memory-limit")
	case limit < 1:
		fail("pinned-memory-limit is %d bytes: it must be at least 1MiB", uint64(e.PinnedMemoryLimit))
	case mem > 0 && limit > mem:
		fail("pinned-memory-limit is %dMiB: the device has only %dMiB", limit, mem)
	}
	// control_privileged is the longest name the daemon binds there.
	if sock := filepath.Join(s.PipeDir(), "control_privileged"); len(sock) > maxSocketPath {
		fail("its control socket %s is %d bytes long, over the %d a unix socket allows: choose a shorter [mps] state-root", sock, len(sock), maxSocketPath)
	}
	return errors.Join(errs...)
}
