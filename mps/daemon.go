package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/mps/peer"

	"github.com/gpuctk/gpuctk/offer"
)

// launch records the device, mounts the tmpfs and the pipe folder, sets
// the compute mode and runs the daemon. The record comes first: it is how
// stop finds a device, so a start killed at any later step leaves nothing
// that `gpuctk mps stop` does not undo.
func (m *Manager) launch(ctx context.Context, ctl string, d *offer.Share) error {
	if err := m.writeRecord(daemonRecord{Share: *d}); err != nil {
		return err
	}
	shm := d.ShmDir()
	if !m.shmMounted(d) {
		opts := fmt.Sprintf("size=%d,mode=1777", uint64(m.shmSize))
		if err := syscall.Mount("gpuctk-mps", shm, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, opts); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", shm, err)
		}
	}
	if err := m.mountPipe(d); err != nil {
		return err
	}
	if err := m.holdComputeMode(d); err != nil {
		return err
	}
	if m.driverRoot != "/" {
		if err := m.linkDriverLibs(d); err != nil {
			return err
		}
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
			if errors.Is(ctx.Err(), context.Canceled) {
				return 0, fmt.Errorf("interrupted while waiting for its daemon to answer: %w", ctx.Err())
			}
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
	// Keep the daemon's pid where no container can change it, and the
	// inode of the socket its listener was checked on: not whatever a
	// tenant put under the socket's name since.
	rec, _ := m.readRecord(d.UUID())
	pid := m.pid(d)
	if pid > 0 && rec.MountNS != 0 {
		// A name that held another socket is checked afresh, as in control.
		var ino uint64
		var err error
		for try := 0; try < viewTries; try++ {
			if ino, err = peer.Socket(d.ControlSocket(), peer.Record{PID: pid, MountNS: rec.MountNS}, time.Second); !errors.Is(err, peer.ErrNotDaemon) {
				break
			}
		}
		if err != nil {
			return 0, fmt.Errorf("its control socket: %w", err)
		}
		rec.Share, rec.PID, rec.ControlInode = *d, pid, ino
		if err := m.writeRecord(rec); err != nil {
			return 0, err
		}
	}
	return pid, nil
}

func (m *Manager) stop(ctx context.Context, ctl string, d *offer.Share) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	r := Result{Device: d, Action: "not running", PID: m.pid(d)}
	if ctl != "" && m.answers(ctx, ctl, d) {
		// A tenant running as root can keep the socket's name away from
		// the daemon's socket: a daemon quit did not reach is killed
		// below, as one that ignored it.
		m.control(ctx, ctl, d, "quit")
		r.Action = "stopped"
	}
wait:
	for delay := 20 * time.Millisecond; m.pid(d) > 0; delay = min(2*delay, 200*time.Millisecond) {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			// It ignored quit or never answered, or the caller gives up
			// waiting: end it.
			if pid := m.pid(d); pid > 0 {
				if err := m.kill(d, pid); err != nil {
					return r, fmt.Errorf("kill its daemon (pid %d): %w", pid, err)
				}
				r.Action = "killed"
			}
			break wait
		case <-t.C:
		}
	}
	if m.shmMounted(d) {
		shm := d.ShmDir()
		// Lazily: a process that still has it open keeps its copy.
		if err := syscall.Unmount(shm, syscall.MNT_DETACH); err != nil {
			return r, fmt.Errorf("unmount %s: %w", shm, err)
		}
	}
	if err := m.unmountPipe(d); err != nil {
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
		for _, dir := range driver.ProgramDirs(m.driverRoot, m.driver...) {
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
		env = append(env, "LD_LIBRARY_PATH="+driverLibDir(d))
	}
	return env
}

// driverLibDir is the folder of links to the driver's libraries that a
// daemon whose driver root is not / loads them from (see linkDriverLibs).
func driverLibDir(d *offer.Share) string { return filepath.Join(d.Dir, "driver-lib") }

// linkDriverLibs makes driverLibDir hold a link to each of the driver's
// libraries under the driver root, and nothing else. The daemon runs with
// the loader and glibc of the system gpuctk runs on (in the device
// plugin's image, the image's): were the driver root's library folders on
// LD_LIBRARY_PATH, the loader would take the driver root's glibc from
// them, which does not match it ("version GLIBC_PRIVATE not defined"),
// and neither the daemon nor its servers would start. The driver's
// libraries need only an older glibc. The folder is made anew for each
// start, so a driver upgraded under the driver root is what the next
// daemon loads.
func (m *Manager) linkDriverLibs(d *offer.Share) error {
	dir := driverLibDir(d)
	tmp, err := os.MkdirTemp(d.Dir, ".driver-lib-")
	if err != nil {
		return fmt.Errorf("driver library folder: %w", err)
	}
	defer os.RemoveAll(tmp) // the old folder, once swapped; the new one on failure
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("driver library folder: %w", err)
	}
	for name, target := range driver.Libraries(m.driverRoot, m.driver...) {
		if err := os.Symlink(target, filepath.Join(tmp, name)); err != nil {
			return fmt.Errorf("driver library folder: %w", err)
		}
	}
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		return fmt.Errorf("driver library folder: %w", err)
	}
	return nil
}

// viewTries bounds how often control checks the pipe folder afresh when
// a name there held something other than the daemon's socket (a tenant
// swapping names): each try is a new check.
const viewTries = 10

// control sends one command to a device's daemon through the control
// binary's client mode and returns the answer. The client runs with a
// private view of the pipe folder (see pipeView): it can reach only the
// sockets checked to be the recorded daemon's.
func (m *Manager) control(ctx context.Context, ctl string, d *offer.Share, command string) (string, error) {
	rec, err := m.readRecord(d.UUID())
	if err != nil {
		return "", fmt.Errorf("MPS state: %w", err)
	}
	view := func() error {
		return pipeView(d.PipeDir(), peer.Record{PID: rec.PID, MountNS: rec.MountNS, Socket: rec.ControlInode})
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for try := 1; ; try++ {
		cmd := exec.CommandContext(ctx, ctl)
		cmd.Env = m.env(d, false)
		cmd.Dir = "/"
		cmd.Stdin = strings.NewReader(command + "\n")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.WaitDelay = time.Second
		_, err := inMountNamespace(view, cmd.Run)
		if errors.Is(err, peer.ErrNotDaemon) && try < viewTries && ctx.Err() == nil {
			continue
		}
		if err != nil {
			if s := strings.TrimSpace(stderr.String() + stdout.String()); s != "" {
				err = fmt.Errorf("%w: %s", err, firstLine(s))
			}
			return "", fmt.Errorf("%s: %q: %w", ctl, command, err)
		}
		return strings.TrimSpace(stdout.String()), nil
	}
}

// answers reports whether the device's daemon answers a query.
func (m *Manager) answers(ctx context.Context, ctl string, d *offer.Share) bool {
	out, err := m.control(ctx, ctl, d, "get_default_active_thread_percentage")
	if err != nil {
		return false
	}
	_, err = strconv.ParseFloat(out, 64)
	return err == nil
}
