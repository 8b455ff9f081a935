package mps

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/driver"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/offer"
)

// Manager starts, stops and reports the MPS control daemons of a host.
type Manager struct {
	driverRoot string
	stateRoot  string
	shmSize    config.Size
	modes      ComputeModer
	timeout    time.Duration
}

// Option configures a Manager.
type Option func(*Manager)

// WithDriverRoot sets where the driver's files are.
func WithDriverRoot(root string) Option { return func(m *Manager) { m.driverRoot = root } }

// WithStateRoot sets the folder of the daemons' pipe, log and shm folders
// (default: [mps] state-root's default).
func WithStateRoot(root string) Option { return func(m *Manager) { m.stateRoot = root } }

// WithShmSize sets the size of each device's /dev/shm tmpfs.
func WithShmSize(size config.Size) Option { return func(m *Manager) { m.shmSize = size } }

// WithComputeModer puts each MPS-shared GPU in EXCLUSIVE_PROCESS compute
// mode while its daemons run. Without it compute modes are left alone.
func WithComputeModer(c ComputeModer) Option { return func(m *Manager) { m.modes = c } }

// WithTimeout bounds how long starting or stopping one daemon may take
// (default: [mps] start-timeout's default).
func WithTimeout(d time.Duration) Option { return func(m *Manager) { m.timeout = d } }

// New returns a Manager with the configuration's defaults changed by opts.
func New(opts ...Option) *Manager {
	d := config.Default()
	m := &Manager{driverRoot: d.CDI.DriverRoot, stateRoot: d.MPS.StateRoot, shmSize: d.MPS.ShmSize, timeout: d.MPS.Timeout()}
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
}

// Start starts a daemon for each MPS-shared device in devs that has none;
// devs come from offer.Resolve, which checked them against the rules of
// MPS. A device whose daemon already answers is left alone. A device that
// fails to start is left as it was found: no daemon, no mount, its compute
// mode restored.
func (m *Manager) Start(devs []*offer.Share) ([]Result, error) {
	devs = mpsOnly(devs)
	if len(devs) == 0 {
		return nil, nil
	}
	for _, d := range devs {
		if want := filepath.Join(m.stateRoot, d.UUID()); d.Dir != want {
			return nil, fmt.Errorf("MPS device %s: its folder is %s, not %s: resolve the devices with the state root the manager uses", d, d.Dir, want)
		}
	}
	ctl, err := FindControl(m.driverRoot)
	if err != nil {
		return nil, err
	}
	unlock, err := m.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var results []Result
	for _, d := range devs {
		r, err := m.start(ctl, d)
		if err != nil {
			return results, fmt.Errorf("MPS device %s: %w", d, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// Stop stops the daemons of the MPS-shared devices in devs and of every
// other device gpuctk started a daemon for, unmounts their tmpfs and
// restores compute modes. Stopping a device with no daemon is not an error.
func (m *Manager) Stop(devs []*offer.Share) ([]Result, error) {
	unlock, err := m.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := m.withStarted(mpsOnly(devs))
	if err != nil {
		return nil, err
	}
	ctl, ctlErr := FindControl(m.driverRoot)
	var results []Result
	for _, s := range all {
		if ctlErr != nil && (m.pid(s.Device) > 0 || m.shmMounted(s.Device)) {
			return results, ctlErr
		}
		r, err := m.stop(ctl, s.Device)
		if err != nil {
			return results, fmt.Errorf("MPS device %s: %w", s.Device, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// Status reports the daemons of the MPS-shared devices in devs and of any
// other device gpuctk started a daemon for.
func (m *Manager) Status(devs []*offer.Share) ([]Status, error) {
	all, err := m.withStarted(mpsOnly(devs))
	if err != nil {
		return nil, err
	}
	ctl, ctlErr := FindControl(m.driverRoot)
	for i := range all {
		s := &all[i]
		s.PID = m.pid(s.Device)
		s.ShmMounted = m.shmMounted(s.Device)
		if ctlErr == nil {
			s.Answering = m.answers(context.Background(), ctl, s.Device)
		}
	}
	return all, nil
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
// record for, as Statuses with Device, PipeDir and Configured set.
func (m *Manager) withStarted(devs []*offer.Share) ([]Status, error) {
	var out []Status
	for _, d := range devs {
		out = append(out, Status{Device: d, PipeDir: d.PipeDir(), Configured: true})
	}
	started, err := m.started()
	if err != nil {
		return nil, err
	}
	for _, d := range started {
		if !slices.ContainsFunc(devs, func(c *offer.Share) bool { return c.UUID() == d.UUID() }) {
			out = append(out, Status{Device: d, PipeDir: d.PipeDir()})
		}
	}
	return out, nil
}

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

func (m *Manager) lock() (func(), error) {
	if err := os.MkdirAll(m.stateRoot, 0o755); err != nil {
		return nil, fmt.Errorf("MPS state: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(m.stateRoot, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("MPS state: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("MPS state: lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

func (m *Manager) start(ctl string, d *offer.Share) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	pipe, logDir, shm := d.PipeDir(), d.LogDir(), d.ShmDir()
	for _, dir := range []string{pipe, logDir, shm} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return Result{}, err
		}
	}
	if m.answers(ctx, ctl, d) {
		return Result{Device: d, Action: "already running", PID: m.pid(d)}, nil
	}
	if pid := m.pid(d); pid > 0 {
		return Result{}, fmt.Errorf("its daemon (pid %d) does not answer on %s: run `gpuctk mps stop`, then start again", pid, pipe)
	}
	// A daemon that died leaves its socket and pid file behind.
	if err := clearDir(pipe); err != nil {
		return Result{}, err
	}
	err := m.launch(ctx, ctl, d)
	if err == nil {
		var pid int
		if pid, err = m.configure(ctx, ctl, d); err == nil {
			return Result{Device: d, Action: "started", PID: pid}, nil
		}
	}
	if _, serr := m.stop(ctl, d); serr != nil {
		err = fmt.Errorf("%w (cleaning up: %v)", err, serr)
	}
	return Result{}, err
}

// launch mounts the tmpfs, sets the compute mode, records the device and
// runs the daemon.
func (m *Manager) launch(ctx context.Context, ctl string, d *offer.Share) error {
	shm := d.ShmDir()
	if !m.shmMounted(d) {
		opts := fmt.Sprintf("size=%d,mode=1777", uint64(m.shmSize))
		if err := syscall.Mount("gpuctk-mps", shm, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, opts); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", shm, err)
		}
	}
	if err := m.holdComputeMode(d); err != nil {
		return err
	}
	if err := m.writeRecord(daemonRecord{Share: *d}); err != nil {
		return err
	}
	// The daemon forks and its parent exits; its output goes to a file
	// rather than a pipe the daemon could hold open forever.
	outPath := filepath.Join(d.LogDir(), "gpuctk-start.out")
	out, err := os.OpenFile(outPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, ctl, "-d")
	cmd.Env = m.env(d, true)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	ns, err := inShmNamespace(shm, cmd.Run)
	if ns != 0 {
		// The daemon's namespace: only a process in it can be the daemon.
		if werr := m.writeRecord(daemonRecord{Share: *d, MountNS: ns}); werr != nil {
			return werr
		}
	}
	if err != nil {
		msg, _ := os.ReadFile(outPath)
		if s := strings.TrimSpace(string(msg)); s != "" {
			return fmt.Errorf("%s -d: %w: %s", ctl, err, firstLine(s))
		}
		return fmt.Errorf("%s -d: %w", ctl, err)
	}
	return nil
}

// configure waits until the daemon answers and sets its defaults.
func (m *Manager) configure(ctx context.Context, ctl string, d *offer.Share) (int, error) {
	for delay := 20 * time.Millisecond; !m.answers(ctx, ctl, d); delay = min(2*delay, 200*time.Millisecond) {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("its daemon did not answer get_default_active_thread_percentage within %s: see %s",
				m.timeout, filepath.Join(d.LogDir(), "control.log"))
		case <-time.After(delay):
		}
	}
	p := d.ThreadPercentage
	for _, c := range []string{
		fmt.Sprintf("set_default_active_thread_percentage %d", p),
		fmt.Sprintf("set_default_device_pinned_mem_limit 0 %dM", d.PinnedMemoryMiB),
	} {
		if _, err := m.control(ctx, ctl, d, c); err != nil {
			return 0, err
		}
	}
	got, err := m.control(ctx, ctl, d, "get_default_active_thread_percentage")
	if err != nil {
		return 0, err
	}
	if f, err := strconv.ParseFloat(got, 64); err != nil || int(f) != p {
		return 0, fmt.Errorf("its daemon reports an active thread percentage of %q after it was set to %d", got, p)
	}
	// Keep the daemon's pid where no container can change it.
	rec, _ := m.readRecord(d.UUID())
	pid := m.pid(d)
	if pid > 0 && rec.MountNS != 0 {
		rec.Share, rec.PID = *d, pid
		if err := m.writeRecord(rec); err != nil {
			return 0, err
		}
	}
	return pid, nil
}

func (m *Manager) stop(ctl string, d *offer.Share) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	r := Result{Device: d, Action: "not running", PID: m.pid(d)}
	if ctl != "" && m.answers(ctx, ctl, d) {
		if _, err := m.control(ctx, ctl, d, "quit"); err != nil {
			return r, err
		}
		r.Action = "stopped"
	}
	for delay := 20 * time.Millisecond; m.pid(d) > 0; delay = min(2*delay, 200*time.Millisecond) {
		if ctx.Err() != nil {
			// It ignored quit or never answered: end it.
			pid := m.pid(d)
			if err := m.kill(d, pid); err != nil {
				return r, fmt.Errorf("kill its daemon (pid %d): %w", pid, err)
			}
			r.Action = "killed"
			time.Sleep(100 * time.Millisecond)
			break
		}
		time.Sleep(delay)
	}
	if m.shmMounted(d) {
		shm := d.ShmDir()
		// Lazily: a process that still has it open keeps its copy.
		if err := syscall.Unmount(shm, syscall.MNT_DETACH); err != nil {
			return r, fmt.Errorf("unmount %s: %w", shm, err)
		}
	}
	if err := clearDir(d.PipeDir()); err != nil {
		return r, err
	}
	if err := os.Remove(m.recordPath(d.UUID())); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("MPS state: %w", err)
	}
	return r, m.releaseComputeMode(d)
}

// env builds the daemon's or a client's environment from scratch: nothing
// of gpuctk's own environment reaches the daemon.
func (m *Manager) env(d *offer.Share, daemon bool) []string {
	var path []string
	if m.driverRoot != "/" {
		for _, dir := range driver.BinDirs {
			path = append(path, filepath.Join(m.driverRoot, dir))
		}
	}
	path = append(path, "/usr/sbin", "/usr/bin", "/sbin", "/bin")
	env := []string{
		"PATH=" + strings.Join(path, ":"),
		"CUDA_MPS_PIPE_DIRECTORY=" + d.PipeDir(),
		"CUDA_MPS_LOG_DIRECTORY=" + d.LogDir(),
	}
	if daemon {
		// The device is ordinal 0 inside the daemon and its server.
		env = append(env, "CUDA_VISIBLE_DEVICES="+d.UUID())
	}
	if m.driverRoot != "/" {
		var libs []string
		for _, dir := range driver.LibDirs {
			if fi, err := os.Stat(filepath.Join(m.driverRoot, dir)); err == nil && fi.IsDir() {
				libs = append(libs, filepath.Join(m.driverRoot, dir))
			}
		}
		if len(libs) > 0 {
			env = append(env, "LD_LIBRARY_PATH="+strings.Join(libs, ":"))
		}
	}
	return env
}

// control sends one command to a device's daemon through the control
// binary's client mode and returns the answer.
func (m *Manager) control(ctx context.Context, ctl string, d *offer.Share, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctl)
	cmd.Env = m.env(d, false)
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(command + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if s := strings.TrimSpace(stderr.String() + stdout.String()); s != "" {
			err = fmt.Errorf("%w: %s", err, firstLine(s))
		}
		return "", fmt.Errorf("%s: %q: %w", ctl, command, err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// answers reports whether the device's daemon answers a query.
func (m *Manager) answers(ctx context.Context, ctl string, d *offer.Share) bool {
	if _, err := os.Stat(filepath.Join(d.PipeDir(), "control")); err != nil {
		return false
	}
	out, err := m.control(ctx, ctl, d, "get_default_active_thread_percentage")
	if err != nil {
		return false
	}
	_, err = strconv.ParseFloat(out, 64)
	return err == nil
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

// pidFile is where the control daemon writes its pid, in its pipe folder.
const pidFile = "nvidia-cuda-mps-control.pid"

// pid returns the pid of the device's running daemon, 0 when none runs.
// The pipe folder is bind-mounted read-write into every replica container,
// so its pid file is read only when the state root has no pid, and no pid
// is trusted unless that process is the device's daemon (see isDaemon).
func (m *Manager) pid(d *offer.Share) int {
	rec, _ := m.readRecord(d.UUID())
	pipe := d.PipeDir()
	if rec.PID > 0 {
		if isDaemon(rec.PID, pipe, rec.MountNS) {
			return rec.PID
		}
		return 0
	}
	if pid := readPIDFile(filepath.Join(pipe, pidFile)); pid > 0 && isDaemon(pid, pipe, rec.MountNS) {
		return pid
	}
	// No pid file (or a stale one): look for a daemon serving this pipe.
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && isDaemon(pid, pipe, rec.MountNS) {
			return pid
		}
	}
	return 0
}

// kill sends SIGKILL to pid if it still is the device's daemon. The pidfd
// keeps the pid from being reused between the check and the signal.
func (m *Manager) kill(d *offer.Share, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	rec, _ := m.readRecord(d.UUID())
	if !isDaemon(pid, d.PipeDir(), rec.MountNS) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// readPIDFile reads a pid file that a container may have replaced: only a
// regular file, not through a symlink, never blocking, at most 32 bytes.
// It returns 0 when there is no usable pid.
func readPIDFile(path string) int {
	// O_PATH opens nothing (no FIFO wait, no device open) until the file
	// is known to be a regular one.
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0
	}
	buf := make([]byte, 32)
	n, err := unix.Read(fd, buf)
	if err != nil || n <= 0 {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// isDaemon reports whether pid is the control daemon of pipe that gpuctk
// started: a control daemon serving pipe, in the mount namespace gpuctk
// made for it when mountNS is not 0, else at least sharing gpuctk's root
// folder. A container's process can take the daemon's name and
// environment, but neither its namespace nor the host's root.
func isDaemon(pid int, pipe string, mountNS uint64) bool {
	if !isControl(pid, pipe) {
		return false
	}
	if mountNS != 0 {
		var st unix.Stat_t
		return unix.Stat(fmt.Sprintf("/proc/%d/ns/mnt", pid), &st) == nil && st.Ino == mountNS
	}
	var root, own unix.Stat_t
	return unix.Stat(fmt.Sprintf("/proc/%d/root", pid), &root) == nil && unix.Stat("/proc/self/root", &own) == nil &&
		root.Dev == own.Dev && root.Ino == own.Ino
}

// isControl reports whether pid is a control daemon, serving pipe when
// pipe is not empty. Its name and environment alone prove nothing: see
// isDaemon.
func isControl(pid int, pipe string) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	// The kernel keeps 15 characters of the name.
	if err != nil || strings.TrimSpace(string(comm)) != controlName[:15] {
		return false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// A zombie has quit already.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			return false
		}
	}
	if pipe == "" {
		return true
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return err == nil && slices.Contains(strings.Split(string(environ), "\x00"), "CUDA_MPS_PIPE_DIRECTORY="+pipe)
}

// shmMounted reports whether the device's tmpfs is mounted.
func (m *Manager) shmMounted(d *offer.Share) bool {
	return isMountPoint(d.ShmDir())
}

// isMountPoint reports whether path is a mount point in gpuctk's mount
// namespace.
func isMountPoint(path string) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	path, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	if path, err = filepath.Abs(path); err != nil {
		return false
	}
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == path {
			return true
		}
	}
	return false
}

// unescapeMount undoes the octal escapes of mountinfo (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// inShmNamespace runs fn on a thread in a new mount namespace where shm is
// mounted on /dev/shm, so a process fn starts (the daemon) and its
// children see that tmpfs as /dev/shm. It returns the namespace's
// inode number, by which the daemon is told from any other process. Nothing done in the namespace
// propagates to the host, and the namespace lives as long as the daemon.
//
// The thread goes back to the host's namespace before the goroutine ends,
// and stays locked so Go discards it rather than reuse a thread whose
// file-system attributes are no longer shared: were it the main thread,
// which Go keeps, /proc/self would otherwise show the daemon's mounts.
func inShmNamespace(shm string, fn func() error) (uint64, error) {
	type result struct {
		ns  uint64
		err error
	}
	errc := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/mnt")
		if err != nil {
			errc <- result{err: err}
			return
		}
		defer host.Close()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- result{err: fmt.Errorf("new mount namespace: %w", err)}
			return
		}
		defer func() {
			if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNS); err != nil {
				// Cannot happen for a thread that just unshared; if it
				// did, the thread must not live on.
				panic(fmt.Sprintf("mps: back to the host mount namespace: %v", err))
			}
		}()
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			errc <- result{err: fmt.Errorf("make mounts private: %w", err)}
			return
		}
		if err := unix.Mount(shm, "/dev/shm", "", unix.MS_BIND, ""); err != nil {
			errc <- result{err: fmt.Errorf("mount %s on /dev/shm: %w", shm, err)}
			return
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/mnt", &st); err != nil {
			errc <- result{err: fmt.Errorf("new mount namespace: %w", err)}
			return
		}
		errc <- result{st.Ino, fn()}
	}()
	r := <-errc
	return r.ns, r.err
}

// clearDir removes what is in dir, keeping dir itself: containers that
// have it bind-mounted see the next daemon's socket there.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
