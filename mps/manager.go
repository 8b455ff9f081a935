package mps

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/internal/readfile"
	"github.com/gpuctk/gpuctk/offer"
)

// Manager starts, stops and reports the MPS control daemons of a host.
type Manager struct {
	driverRoot string
	// driver says where, beyond the usual folders, the driver's files are.
	driver    []driver.Option
	stateRoot string
	shmSize   config.Size
	pipeSize  config.Size
	modes     ComputeModer
	timeout   time.Duration
}

// Option configures a Manager.
type Option func(*Manager)

// WithDriverRoot sets where the driver's files are.
func WithDriverRoot(root string) Option { return func(m *Manager) { m.driverRoot = root } }

// WithLibrarySearchPaths sets folders under the driver root that hold
// the driver's libraries when no linker cache lists them ([cdi]
// library-search-paths): the daemon's libraries and programs are found
// there.
func WithLibrarySearchPaths(dirs ...string) Option {
	return func(m *Manager) { m.driver = append(m.driver, driver.WithLibrarySearchPaths(dirs...)) }
}

// WithStateRoot sets the folder of the daemons' pipe, log and shm folders
// (default: [mps] state-root's default).
func WithStateRoot(root string) Option { return func(m *Manager) { m.stateRoot = root } }

// WithShmSize sets the size of each device's /dev/shm tmpfs.
func WithShmSize(size config.Size) Option { return func(m *Manager) { m.shmSize = size } }

// WithPipeSize sets the size of each device's pipe folder, a tmpfs every
// replica container can write: what a tenant fills there
// is taken from it, not from the host's /run.
func WithPipeSize(size config.Size) Option { return func(m *Manager) { m.pipeSize = size } }

// WithComputeModer puts each MPS-shared GPU in EXCLUSIVE_PROCESS compute
// mode while its daemons run. Without it compute modes are left alone.
func WithComputeModer(c ComputeModer) Option { return func(m *Manager) { m.modes = c } }

// WithTimeout bounds how long starting or stopping one daemon may take
// (default: [mps] start-timeout's default).
func WithTimeout(d time.Duration) Option { return func(m *Manager) { m.timeout = d } }

// New returns a Manager.
func New(opts ...Option) *Manager {
	d := config.Default()
	m := &Manager{driverRoot: d.CDI.DriverRoot, stateRoot: d.MPS.StateRoot, shmSize: d.MPS.ShmSize, pipeSize: d.MPS.PipeSize, timeout: d.MPS.Timeout()}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Result says what Start or Stop did to one device's daemon.
type Result struct {
	Device *offer.Share `json:"device"`
	// Action is "started", "already running", "stopped", "killed" (it did
	// not quit in time) or "not running".
	Action string `json:"action"`
	PID    int    `json:"pid,omitempty"`
}

// Status is the state of one device's daemon.
type Status struct {
	Device  *offer.Share `json:"device"`
	PID     int          `json:"pid,omitempty"`
	PipeDir string       `json:"pipeDir"`
	// Answering is true when the daemon answers on its control socket.
	Answering  bool `json:"answering"`
	ShmMounted bool `json:"shmMounted"`
	// Configured is false for a daemon gpuctk started for a device that
	// the configuration no longer shares through MPS.
	Configured bool `json:"configured"`
	// Outdated is true for a daemon started with another active thread
	// percentage or pinned memory limit than the configuration now gives
	// its device: it keeps its own until it is stopped and started.
	Outdated bool `json:"outdated,omitempty"`
}

// Start starts a daemon for each MPS-shared device in devs that has none;
// devs come from offer.Resolve, which checked them against the rules of
// MPS. A device whose daemon already answers is left alone. A device that
// fails to start is left as it was found: no daemon, no mount, its compute
// mode restored; the other devices are started all the same (what a tenant
// does to its own device's daemon must not keep the others down), and the
// error has one line per device that failed.
func (m *Manager) Start(ctx context.Context, devs []*offer.Share) ([]Result, error) {
	devs = mpsOnly(devs)
	if len(devs) == 0 {
		return nil, nil
	}
	for _, d := range devs {
		if want := filepath.Join(m.stateRoot, d.UUID()); d.Dir != want {
			return nil, fmt.Errorf("MPS device %s: its folder is %s, not %s: resolve the devices with the state root the manager uses", d, d.Dir, want)
		}
	}
	ctl, err := FindControl(m.driverRoot, m.driver...)
	if err != nil {
		return nil, err
	}
	unlock, err := m.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var results []Result
	var errs []error
	for _, d := range devs {
		r, err := m.start(ctx, ctl, d)
		if err != nil {
			errs = append(errs, fmt.Errorf("MPS device %s: %w", d, err))
			if ctx.Err() != nil {
				break // interrupted: the next devices would fail the same way
			}
			continue
		}
		results = append(results, r)
	}
	return results, errors.Join(errs...)
}

// Stop stops the daemons of the MPS-shared devices in devs and of every
// other device gpuctk started a daemon for, unmounts their tmpfs and
// restores compute modes, those an earlier stop failed to restore too.
// Stopping a device with no daemon is not an error. A device that fails
// to stop does not keep the others from stopping; the error has one line
// per device that failed.
func (m *Manager) Stop(ctx context.Context, devs []*offer.Share) ([]Result, error) {
	unlock, err := m.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, broken, err := m.withStarted(mpsOnly(devs))
	if err != nil {
		return nil, err
	}
	ctl, ctlErr := FindControl(m.driverRoot, m.driver...)
	var results []Result
	errs := broken
	for _, s := range all {
		if ctlErr != nil && (m.pid(s.Device) > 0 || m.shmMounted(s.Device)) {
			return results, errors.Join(append(errs, ctlErr)...)
		}
		r, err := m.stop(ctx, ctl, s.Device)
		if err != nil {
			errs = append(errs, fmt.Errorf("MPS device %s: %w", s.Device, err))
			continue
		}
		results = append(results, r)
	}
	if err := m.releaseLeftComputeModes(); err != nil {
		errs = append(errs, err)
	}
	return results, errors.Join(errs...)
}

// Status reports the daemons of the MPS-shared devices in devs and of any
// other device gpuctk started a daemon for. A daemon record that cannot be
// read is an error, with the statuses of all the others.
func (m *Manager) Status(ctx context.Context, devs []*offer.Share) ([]Status, error) {
	all, broken, err := m.withStarted(mpsOnly(devs))
	if err != nil {
		return nil, err
	}
	ctl, ctlErr := FindControl(m.driverRoot, m.driver...)
	for i := range all {
		s := &all[i]
		s.PID = m.pid(s.Device)
		s.ShmMounted = m.shmMounted(s.Device)
		if ctlErr == nil {
			// A hung daemon takes the query and never answers.
			ctx, cancel := context.WithTimeout(ctx, m.timeout)
			s.Answering = m.answers(ctx, ctl, s.Device)
			cancel()
		}
		if s.Configured && (s.Answering || s.PID > 0) {
			s.Outdated = m.outdated(s.Device) != ""
		}
	}
	return all, errors.Join(broken...)
}

func mpsOnly(devs []*offer.Share) []*offer.Share {
	var out []*offer.Share
	for _, d := range devs {
		if d.IsMPS() {
			out = append(out, d)
		}
	}
	return out
}

// withStarted returns devs plus the devices the state root has a daemon
// record for, as Statuses with Device, PipeDir and Configured set, and the
// records that cannot be read (see started).
func (m *Manager) withStarted(devs []*offer.Share) ([]Status, []error, error) {
	var out []Status
	for _, d := range devs {
		out = append(out, Status{Device: d, PipeDir: d.PipeDir(), Configured: true})
	}
	started, broken, err := m.started()
	if err != nil {
		return nil, nil, err
	}
	for _, d := range started {
		if !slices.ContainsFunc(devs, func(c *offer.Share) bool { return c.UUID() == d.UUID() }) {
			out = append(out, Status{Device: d, PipeDir: d.PipeDir()})
		}
	}
	return out, broken, nil
}

// lockWait is how long start and stop wait for another's lock on the
// state root: each device's start or stop is bounded by the timeout, and
// this leaves room for some thirty of them ahead (five minutes at the
// default ten seconds), not for a command hung for good.
func (m *Manager) lockWait() time.Duration { return 30 * m.timeout }

// lock takes the state root's lock, which one start or stop at a time
// holds, waiting at most lockWait for another, and no longer than ctx
// lasts (`gpuctk mps run` given SIGTERM while it waits).
func (m *Manager) lock(ctx context.Context) (func(), error) {
	if err := os.MkdirAll(m.stateRoot, 0o755); err != nil {
		return nil, fmt.Errorf("MPS state: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(m.stateRoot, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("MPS state: %w", err)
	}
	wait := m.lockWait()
	for start := time.Now(); ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err == syscall.EWOULDBLOCK && time.Since(start) > wait {
			holder := lockHolder(f)
			f.Close()
			return nil, fmt.Errorf("MPS state: %s has held %s for over %v (another `gpuctk mps start`, `stop` or `run` at work, or hung): let it finish or stop it, then try again",
				holder, f.Name(), wait)
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			f.Close()
			return nil, fmt.Errorf("MPS state: lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			holder := lockHolder(f)
			f.Close()
			return nil, fmt.Errorf("MPS state: interrupted while waiting for %s, which %s holds: %w", f.Name(), holder, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lockHolder names the process holding the flock on f's file, with its
// command line, as /proc/locks gives it; "another process" when it
// cannot tell.
func lockHolder(f *os.File) string {
	pid := flockHolder(f)
	if pid <= 0 {
		return "another process"
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return fmt.Sprintf("pid %d (%s)", pid, strings.Join(strings.Fields(strings.ReplaceAll(string(comm), "\x00", " ")), " "))
}

// flockHolder returns the pid /proc/locks gives for the flock held on f's
// file, 0 when it cannot tell.
func flockHolder(f *os.File) int {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	data, err := readfile.Limited("/proc/locks", 4<<20)
	if err != nil {
		return 0
	}
	// 1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for line := range strings.SplitSeq(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 6 && fields[1] == "FLOCK" && fields[5] == want {
			if pid, err := strconv.Atoi(fields[4]); err == nil {
				return pid
			}
		}
	}
	return 0
}

func (m *Manager) start(ctx context.Context, ctl string, d *offer.Share) (Result, error) {
	pipe, logDir, shm := d.PipeDir(), d.LogDir(), d.ShmDir()
	for _, dir := range []string{pipe, logDir, shm} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return Result{}, err
		}
	}
	qctx, cancel := context.WithTimeout(ctx, m.timeout)
	answers := m.answers(qctx, ctl, d)
	cancel()
	if answers {
		if was := m.outdated(d); was != "" {
			return Result{}, fmt.Errorf("its daemon (pid %d) runs with %s, not the configuration's %d%% and %dM: run `gpuctk mps stop`, then start again",
				m.pid(d), was, d.ThreadPercentage, d.PinnedMemoryMiB)
		}
		return Result{Device: d, Action: "already running", PID: m.pid(d)}, nil
	}
	return m.restart(ctx, ctl, d)
}

// restart starts d's daemon, which does not answer, ending it first if it
// runs.
func (m *Manager) restart(ctx context.Context, ctl string, d *offer.Share) (Result, error) {
	action := "started"
	if pid := m.pid(d); pid > 0 {
		// A daemon whose control socket a tenant (as root) removed, or
		// that hangs, serves no new client of the device: it is ended
		// and started again, as `stop` then `start` would.
		why := m.fault(d)
		if err := m.end(ctx, ctl, d, pid); err != nil {
			return Result{}, fmt.Errorf("its daemon (pid %d) %s, and could not be stopped: %w", pid, why, err)
		}
		action = "restarted: its daemon (pid " + strconv.Itoa(pid) + ") " + why
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	// A daemon that died leaves its socket and pid file behind, and
	// tenants whatever they like.
	if err := m.resetPipe(d); err != nil {
		return Result{}, err
	}
	err := m.launch(ctx, ctl, d)
	if err == nil {
		var pid int
		if pid, err = m.configure(ctx, ctl, d); err == nil {
			return Result{Device: d, Action: action, PID: pid}, nil
		}
	}
	if _, serr := m.stop(ctx, ctl, d); serr != nil {
		err = fmt.Errorf("%w (cleaning up: %v)", err, serr)
	}
	return Result{}, err
}

// fault says what is wrong with d's daemon, which does not answer:
// its control socket is gone, or it does not answer on it.
func (m *Manager) fault(d *offer.Share) string {
	if _, err := os.Lstat(d.ControlSocket()); errors.Is(err, fs.ErrNotExist) {
		return "lost its control socket " + d.ControlSocket()
	}
	return "does not answer on its control socket " + d.ControlSocket()
}

// end stops d's daemon pid, which does not answer: killed at once (quit
// cannot reach it), then its mounts and record undone as stop does.
func (m *Manager) end(ctx context.Context, ctl string, d *offer.Share, pid int) error {
	if err := m.kill(d, pid); err != nil {
		return fmt.Errorf("kill its daemon (pid %d): %w", pid, err)
	}
	_, err := m.stop(ctx, ctl, d)
	return err
}

// HealInterval is how often Heal should run: a daemon that lost its
// socket is then restarted within HealInterval plus a start, one that
// hangs within HealInterval plus healAnswer plus a start, under 10 s.
const HealInterval = 2 * time.Second

// healAnswer is how long Heal waits for a daemon's answer.
const healAnswer = 3 * time.Second

// Heal restarts the daemons of devs (those Start started) that are gone,
// have lost their control socket, or do not answer on it within
// healAnswer: a tenant running as root that removes its device's socket
// would otherwise lock the device's other tenants out until an
// administrator ran stop and start. A device with no record (`gpuctk mps
// stop` ran) is left alone. It returns one Result per device restarted,
// whose Action says what was found.
func (m *Manager) Heal(ctx context.Context, devs []*offer.Share) ([]Result, error) {
	if devs = mpsOnly(devs); len(devs) == 0 {
		return nil, nil
	}
	ctl, err := FindControl(m.driverRoot)
	if err != nil {
		return nil, err
	}
	// Every device at once: daemons that hang cost one wait, not one each.
	sick := make([]int, len(devs)) // the pid found not answering, -1 when fine
	var wg sync.WaitGroup
	for i, d := range devs {
		wg.Go(func() { sick[i] = m.sick(ctx, ctl, d) })
	}
	wg.Wait()
	if !slices.ContainsFunc(sick, func(pid int) bool { return pid >= 0 }) {
		return nil, nil
	}
	unlock, err := m.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var results []Result
	var errs []error
	for i, d := range devs {
		// Under the lock, an administrator's stop or start may have come
		// first: no record, or another daemon, is left alone.
		if _, err := m.readRecord(d.UUID()); sick[i] < 0 || err != nil || m.pid(d) != sick[i] {
			continue
		}
		r, err := m.restart(ctx, ctl, d)
		if err != nil {
			errs = append(errs, fmt.Errorf("MPS device %s: restarting its daemon: %w", d, err))
			continue
		}
		if sick[i] == 0 {
			r.Action = "restarted: its daemon was gone"
		}
		results = append(results, r)
	}
	return results, errors.Join(errs...)
}

// sick returns the pid of d's daemon (0 for none) when it needs a
// restart: it died, lost its control socket or does not answer within
// healAnswer; -1 when it answers, or gpuctk has no record of it (never
// started, or stopped).
func (m *Manager) sick(ctx context.Context, ctl string, d *offer.Share) int {
	if _, err := m.readRecord(d.UUID()); err != nil {
		return -1
	}
	pid := m.pid(d)
	if pid > 0 {
		if _, err := os.Lstat(d.ControlSocket()); errors.Is(err, fs.ErrNotExist) {
			return pid
		}
	}
	ctx, cancel := context.WithTimeout(ctx, healAnswer)
	defer cancel()
	if m.answers(ctx, ctl, d) {
		return -1
	}
	return pid
}

// outdated describes the settings d's daemon was started with when they
// are not d's, and returns "" when they are or nothing is recorded.
func (m *Manager) outdated(d *offer.Share) string {
	rec, err := m.readRecord(d.UUID())
	if err != nil || (rec.ThreadPercentage == d.ThreadPercentage && rec.PinnedMemoryMiB == d.PinnedMemoryMiB) {
		return ""
	}
	return fmt.Sprintf("%d%% threads and %dM pinned memory", rec.ThreadPercentage, rec.PinnedMemoryMiB)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
