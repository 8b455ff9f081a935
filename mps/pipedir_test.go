package mps

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/config"
)

// The pipe folder is bind-mounted read-write into every replica container:
// what a container leaves there must neither hang gpuctk nor make it trust
// or kill a process of the container's choosing.

func TestReadPIDFile(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	os.WriteFile(path("good"), []byte("1234\n"), 0o644)
	os.WriteFile(path("junk"), []byte("12x\n"), 0o644)
	os.WriteFile(path("huge"), append([]byte("1234"), make([]byte, 1<<20)...), 0o644)
	if err := unix.Mkfifo(path("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/dev/zero", path("zero"))
	os.Symlink(path("good"), path("link"))
	os.Mkdir(path("dir"), 0o755)
	for _, tc := range []struct {
		name string
		want int
	}{
		{"good", 1234}, {"junk", 0}, {"huge", 0}, {"fifo", 0}, {"zero", 0}, {"link", 0}, {"dir", 0}, {"missing", 0},
	} {
		done := make(chan int, 1)
		go func() { done <- readPIDFile(path(tc.name)) }()
		select {
		case got := <-done:
			if got != tc.want {
				t.Errorf("%s: pid %d, want %d", tc.name, got, tc.want)
			}
		case <-time.After(5 * time.Second):
			unblockFIFO(path(tc.name))
			t.Fatalf("%s: reading the pid file blocks", tc.name)
		}
	}
}

// unblockFIFO lets a reader blocked on a FIFO go on.
func unblockFIFO(path string) {
	if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
		unix.Close(fd)
	}
}

// within runs fn and fails the test if it takes over 10s. fn reports
// with t.Errorf (it runs on a goroutine of its own).
func within(t *testing.T, what, fifo string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		unblockFIFO(fifo)
		<-done
		t.Fatalf("%s blocks on a FIFO at the pid file's path", what)
	}
}

// The names are short: the socket path must fit in 108 bytes.
func TestPIDFileNotRegular(t *testing.T) {
	for _, plant := range []struct {
		name string
		make func(path string) error
	}{
		{"fifo", func(p string) error { return unix.Mkfifo(p, 0o644) }},
		{"zero", func(p string) error { return os.Symlink("/dev/zero", p) }},
	} {
		t.Run(plant.name, func(t *testing.T) {
			m, state := newManager(t, driverRootWith(t, ""), WithTimeout(500*time.Millisecond))
			devs := dgxDevices(t, state, config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
			pipe := devs[0].PipeDir()
			fifo := filepath.Join(pipe, pidFile)

			// No daemon: status and stop see none, and do not block.
			os.MkdirAll(pipe, 0o755)
			if err := plant.make(fifo); err != nil {
				t.Fatal(err)
			}
			within(t, "status", fifo, func() {
				if st, err := m.Status(t.Context(), devs); err != nil || len(st) != 1 || st[0].PID != 0 {
					t.Errorf("status = %+v, %v", st, err)
				}
			})
			within(t, "stop", fifo, func() {
				if res, err := m.Stop(t.Context(), devs); err != nil || len(res) != 1 || res[0].Action != "not running" {
					t.Errorf("stop = %+v, %v", res, err)
				}
			})

			// A running daemon: its pid comes from the state root.
			res, err := m.Start(t.Context(), devs)
			if err != nil {
				t.Fatal(err)
			}
			os.Remove(fifo)
			if err := plant.make(fifo); err != nil {
				t.Fatal(err)
			}
			within(t, "status", fifo, func() {
				if st, err := m.Status(t.Context(), devs); err != nil || len(st) != 1 || st[0].PID != res[0].PID || !st[0].Answering {
					t.Errorf("status = %+v, %v; want pid %d", st, err, res[0].PID)
				}
			})
			within(t, "stop", fifo, func() {
				if res2, err := m.Stop(t.Context(), devs); err != nil || len(res2) != 1 || res2[0].Action != "stopped" || res2[0].PID != res[0].PID {
					t.Errorf("stop = %+v, %v", res2, err)
				}
			})
			if alive(res[0].PID) {
				t.Errorf("daemon %d still runs", res[0].PID)
			}
		})
	}
}

// impostor starts a process that poses as the daemon of pipe: named
// nvidia-cuda-mps-control, with pipe in its environment. In a container
// (chroot) it has a root folder of its own; else it shares gpuctk's.
func impostor(t *testing.T, pipe string, container bool) int {
	t.Helper()
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the impostor runs busybox (tests/install-deps.sh installs busybox-static): %v", err)
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, controlName), busybox, 0o755); err != nil {
		t.Fatal(err)
	}
	// The kernel names the process after the file; busybox runs the
	// applet argv[0] names.
	cmd := exec.Command(filepath.Join(root, controlName))
	cmd.Args = []string{"sleep", "60"}
	cmd.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe}
	if container {
		cmd.Path = "/" + controlName
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	for i := 0; !isControl(pid, pipe) && i < 100; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !isControl(pid, pipe) {
		t.Fatalf("the impostor %d does not look like a control daemon", pid)
	}
	return pid
}

func TestManagerPipeDirImpostor(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""), WithTimeout(500*time.Millisecond))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
	pipe := devs[0].PipeDir()
	os.MkdirAll(pipe, 0o755)

	// No daemon: a container's process named in the pid file is neither
	// reported nor killed, nor does it keep a daemon from starting.
	fake := impostor(t, pipe, true)
	if err := os.WriteFile(filepath.Join(pipe, pidFile), []byte(strconv.Itoa(fake)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Status(t.Context(), devs); err != nil || st[0].PID != 0 {
		t.Errorf("status = %+v, %v", st, err)
	}
	if res, err := m.Stop(t.Context(), devs); err != nil || res[0].Action != "not running" || res[0].PID != 0 {
		t.Errorf("stop = %+v, %v", res, err)
	}
	if !isControl(fake, pipe) {
		t.Fatal("stop killed the container's process")
	}
	if err := os.WriteFile(filepath.Join(pipe, pidFile), []byte(strconv.Itoa(fake)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := m.Start(t.Context(), devs)
	if err != nil || res[0].Action != "started" || res[0].PID == fake {
		t.Fatalf("start = %+v, %v", res, err)
	}

	// A daemon runs: the pid file now names a process, even one that
	// shares the host's root, that is not in the daemon's namespace.
	host := impostor(t, pipe, false)
	for _, pid := range []int{fake, host} {
		if err := os.WriteFile(filepath.Join(pipe, pidFile), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if st, err := m.Status(t.Context(), devs); err != nil || st[0].PID != res[0].PID {
			t.Errorf("status with pid file %d = %+v, %v; want pid %d", pid, st, err, res[0].PID)
		}
	}
	// The daemon ignores quit: stop kills it, and it alone.
	if err := os.WriteFile(filepath.Join(devs[0].LogDir(), "mpsdouble.ignore-quit"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res2, err := m.Stop(t.Context(), devs)
	if err != nil || res2[0].Action != "killed" || res2[0].PID != res[0].PID {
		t.Errorf("stop = %+v, %v", res2, err)
	}
	if alive(res[0].PID) {
		t.Errorf("daemon %d still runs", res[0].PID)
	}
	if !isControl(fake, pipe) || !isControl(host, pipe) {
		t.Error("stop killed an impostor")
	}
}

// The pipe folder is a tmpfs of its own: a tenant filling it fills nothing
// else, and the daemon's socket is root's in a sticky folder.
func TestPipeFolderCapped(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""), WithPipeSize(1<<20))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
	if _, err := m.Start(t.Context(), devs); err != nil {
		t.Fatal(err)
	}
	pipe := devs[0].PipeDir()
	if !isMountPoint(pipe) {
		t.Fatalf("%s is not a mount point", pipe)
	}
	var st unix.Stat_t
	if err := unix.Stat(pipe, &st); err != nil || st.Mode&0o7777 != 0o1777 || st.Uid != 0 {
		t.Errorf("pipe folder mode %o, uid %d, %v; want 1777, root", st.Mode&0o7777, st.Uid, err)
	}
	big := filepath.Join(pipe, "big")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("writing 2MiB into a 1MiB pipe folder: %v, want ENOSPC", err)
	}
	os.Remove(big)
	var err error
	for i := 0; i <= pipeInodes && err == nil; i++ {
		err = os.WriteFile(filepath.Join(pipe, "f"+strconv.Itoa(i)), nil, 0o644)
	}
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("creating %d files: %v, want ENOSPC", pipeInodes+1, err)
	}
	if st, err := m.Status(t.Context(), devs); err != nil || !st[0].Answering {
		t.Errorf("status = %+v, %v", st, err)
	}
}

// fakeDaemon listens on path and answers every command as a daemon would.
func fakeDaemon(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			bufio.NewReader(c).ReadString('\n')
			io.WriteString(c, "100.0\n")
			c.Close()
		}
	}()
}

// What a tenant can leave in the pipe folder: gpuctk neither trusts it nor
// follows it, and start, status and stop keep working, in bounded time.
func TestPipeFolderPlants(t *testing.T) {
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(outside, "sock")
	fakeDaemon(t, other)
	for _, tc := range []struct {
		name string
		// replaces says the plant takes the daemon's socket's name, as a
		// tenant running as root can.
		replaces bool
		plant    func(t *testing.T, pipe string)
	}{
		{"socket", true, func(t *testing.T, pipe string) {
			os.Remove(filepath.Join(pipe, "control"))
			fakeDaemon(t, filepath.Join(pipe, "control"))
		}},
		{"link", true, func(t *testing.T, pipe string) {
			os.Remove(filepath.Join(pipe, "control"))
			os.Symlink(other, filepath.Join(pipe, "control"))
		}},
		{"FIFO", true, func(t *testing.T, pipe string) {
			os.Remove(filepath.Join(pipe, "control"))
			unix.Mkfifo(filepath.Join(pipe, "control"), 0o666)
		}},
		{"out", false, func(t *testing.T, pipe string) {
			os.Symlink(outside, filepath.Join(pipe, "dir"))
			os.Symlink(keep, filepath.Join(pipe, "file"))
		}},
		{"deep", false, func(t *testing.T, pipe string) {
			p := pipe
			for range 200 {
				p = filepath.Join(p, "d")
				if err := os.Mkdir(p, 0o755); err != nil {
					break // ENAMETOOLONG: as deep as a path goes
				}
			}
		}},
		{"many", false, func(t *testing.T, pipe string) {
			for i := range pipeInodes {
				if os.WriteFile(filepath.Join(pipe, "f"+strconv.Itoa(i)), nil, 0o644) != nil {
					break
				}
			}
		}},
		{"locked", false, func(t *testing.T, pipe string) {
			os.Mkdir(filepath.Join(pipe, "x"), 0o755)
			os.WriteFile(filepath.Join(pipe, "x", "y"), nil, 0o644)
			os.Chmod(filepath.Join(pipe, "x"), 0)
			os.Chmod(pipe, 0o700)
			os.Chown(pipe, 1000, 1000)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Time enough for a daemon to answer on a loaded machine.
			m, state := newManager(t, driverRootWith(t, ""), WithTimeout(3*time.Second))
			devs := dgxDevices(t, state, config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
			pipe := devs[0].PipeDir()
			res, err := m.Start(t.Context(), devs)
			if err != nil {
				t.Fatal(err)
			}
			tc.plant(t, pipe)
			within(t, "status", filepath.Join(pipe, "control"), func() {
				st, err := m.Status(t.Context(), devs)
				if err != nil || st[0].PID != res[0].PID || st[0].Answering == tc.replaces {
					t.Errorf("status = %+v, %v; want pid %d, answering %v", st, err, res[0].PID, !tc.replaces)
				}
			})
			// The daemon dies; start recovers from whatever is left.
			if err := m.kill(devs[0], res[0].PID); err != nil {
				t.Fatal(err)
			}
			within(t, "start", filepath.Join(pipe, "control"), func() {
				res2, err := m.Start(t.Context(), devs)
				if err != nil || res2[0].Action != "started" {
					t.Errorf("start = %+v, %v", res2, err)
					return
				}
				if st, err := m.Status(t.Context(), devs); err != nil || !st[0].Answering || st[0].PID != res2[0].PID {
					t.Errorf("status after start = %+v, %v", st, err)
				}
			})
			tc.plant(t, pipe)
			within(t, "stop", filepath.Join(pipe, "control"), func() {
				if _, err := m.Stop(t.Context(), devs); err != nil {
					t.Errorf("stop: %v", err)
				}
			})
			if data, err := os.ReadFile(keep); err != nil || string(data) != "host file" {
				t.Errorf("a file outside the pipe folder: %q, %v", data, err)
			}
			if _, err := os.Stat(other); err != nil {
				t.Errorf("a socket outside the pipe folder: %v", err)
			}
		})
	}
}

// Start and Stop give up when their context does, whatever the timeout.
func TestManagerContext(t *testing.T) {
	t.Run("start", func(t *testing.T) {
		// -d never returns.
		m, state := newManager(t, driverRootWith(t, "#!/bin/sh\nexec sleep 30\n"))
		devs := dgxDevices(t, state, config.Sharing{Devices: []string{"1", "2"}, Strategy: config.MPS, Replicas: 2})
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		// The first device uses up the deadline; the second is not tried.
		if _, err := m.Start(ctx, devs); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("start = %v; want one line", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("start took %s past a 300ms deadline", d)
		}
		for _, d := range devs {
			if isMountPoint(d.ShmDir()) || isMountPoint(d.PipeDir()) {
				t.Errorf("%s: tmpfs left mounted", d)
			}
		}
	})
	t.Run("status", func(t *testing.T) {
		root := driverRootWith(t, "")
		m, state := newManager(t, root, WithTimeout(300*time.Millisecond))
		devs := dgxDevices(t, state, config.Sharing{Devices: []string{"1"}, Strategy: config.MPS, Replicas: 2})
		if _, err := m.Start(t.Context(), devs); err != nil {
			t.Fatal(err)
		}
		// The daemon hangs: the control client waits for an answer that
		// never comes.
		bin := filepath.Join(root, "usr/bin", controlName)
		if err := os.WriteFile(bin+".new", []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(bin+".new", bin); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if st, err := m.Status(t.Context(), devs); err != nil || st[0].Answering || st[0].PID == 0 {
			t.Errorf("status = %+v, %v; want not answering", st, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("status took %s past a 300ms timeout", d)
		}
	})
	t.Run("stop", func(t *testing.T) {
		m, state := newManager(t, driverRootWith(t, ""))
		devs := dgxDevices(t, state, config.Sharing{Devices: []string{"1"}, Strategy: config.MPS, Replicas: 2})
		res, err := m.Start(t.Context(), devs)
		if err != nil {
			t.Fatal(err)
		}
		// A hung daemon: without the deadline, stop waits the 10s timeout.
		if err := os.WriteFile(filepath.Join(devs[0].LogDir(), "mpsdouble.ignore-quit"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		res2, err := m.Stop(ctx, devs)
		if err != nil || res2[0].Action != "killed" {
			t.Errorf("stop = %+v, %v", res2, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("stop took %s past a 300ms deadline", d)
		}
		if alive(res[0].PID) {
			t.Errorf("daemon %d still runs", res[0].PID)
		}
	})
}

// failingQuit is a control binary that runs the double but fails to send
// quit, as when a tenant running as root takes the socket's name away
// between gpuctk's check of the daemon and its quit.
func failingQuit(t *testing.T) string {
	return fmt.Sprintf("#!/bin/sh\n[ \"$1\" = -d ] && exec %[1]s -d\nread -r cmd\n"+
		"[ \"$cmd\" = quit ] && { echo 'Cannot find MPS control daemon process' >&2; exit 1; }\n"+
		"echo \"$cmd\" | exec %[1]s\n", double(t))
}

// What a tenant does to its own device's daemon leaves start and stop of
// the other devices' daemons alone; start restarts its device's daemon.
func TestManagerOtherDevicesGoOn(t *testing.T) {
	t.Run("start", func(t *testing.T) {
		m, state := newManager(t, driverRootWith(t, ""), WithTimeout(500*time.Millisecond))
		devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0", "2"}, Strategy: config.MPS, Replicas: 2})
		res, err := m.Start(t.Context(), devs)
		if err != nil {
			t.Fatal(err)
		}
		// A tenant running as root removes GPU 0's socket; GPU 2's
		// daemon dies.
		os.Remove(devs[0].ControlSocket())
		if err := m.kill(devs[1], res[1].PID); err != nil {
			t.Fatal(err)
		}
		// Each is started again; GPU 0's daemon, which no client can
		// reach any more, is ended first.
		res2, err := m.Start(t.Context(), devs)
		if err != nil {
			t.Errorf("err = %v", err)
		}
		want0 := fmt.Sprintf("restarted: its daemon (pid %d) lost its control socket %s", res[0].PID, devs[0].ControlSocket())
		if len(res2) != 2 || res2[0].Action != want0 || !alive(res2[0].PID) || res2[1].Action != "started" || !alive(res2[1].PID) {
			t.Errorf("start = %+v, want %s's daemon %s and %s's started", res2, devs[0], want0, devs[1])
		}
		if alive(res[0].PID) {
			t.Errorf("%s's old daemon still runs", devs[0])
		}
		if ctl, _ := FindControl(m.driverRoot); !m.answers(t.Context(), ctl, devs[0]) {
			t.Errorf("%s's new daemon does not answer", devs[0])
		}
	})
	t.Run("stop", func(t *testing.T) {
		m, state := newManager(t, driverRootWith(t, failingQuit(t)), WithTimeout(500*time.Millisecond))
		devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0", "2"}, Strategy: config.MPS, Replicas: 2})
		res, err := m.Start(t.Context(), devs)
		if err != nil {
			t.Fatal(err)
		}
		res2, err := m.Stop(t.Context(), devs)
		if err != nil || len(res2) != 2 || res2[0].Action != "killed" || res2[1].Action != "killed" {
			t.Errorf("stop = %+v, %v; want both killed", res2, err)
		}
		for i, r := range res {
			if alive(r.PID) {
				t.Errorf("%s: daemon %d still runs", devs[i], r.PID)
			}
			if isMountPoint(devs[i].ShmDir()) || isMountPoint(devs[i].PipeDir()) {
				t.Errorf("%s: tmpfs left mounted", devs[i])
			}
		}
	})
}

// A tenant running as root in the pipe folder of a daemon that died (start
// reuses that tmpfs, so its containers reach the new daemon) swaps its own
// socket in under the name control right after the new daemon answered.
// gpuctk must not record the tenant's socket as the daemon's: the hook,
// which cannot see the listener's pid from a container's pid namespace,
// would then pass containers on it alone.
func TestManagerRecordsCheckedSocket(t *testing.T) {
	// The control binary runs the double and, once the daemon's defaults
	// are set, lets the tenant swap after the last answer.
	script := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = -d ] && exec %[1]s -d\nread -r cmd\n"+
		"echo \"$cmd\" | %[1]s || exit\n"+
		"case \"$cmd\" in\n"+
		"set_*) touch \"$CUDA_MPS_LOG_DIRECTORY/configured\" ;;\n"+
		"get_*) [ -e \"$CUDA_MPS_LOG_DIRECTORY/configured\" ] || exit 0\n"+
		"  touch \"$CUDA_MPS_LOG_DIRECTORY/swap\"\n"+
		"  i=0; while [ ! -e \"$CUDA_MPS_LOG_DIRECTORY/swapped\" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done ;;\n"+
		"esac\n", double(t))
	m, state := newManager(t, driverRootWith(t, script), WithTimeout(2*time.Second))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
	pipe := devs[0].PipeDir()
	control := devs[0].ControlSocket()

	tenant := make(chan error, 1)
	var planted unix.Stat_t
	go func() {
		for i := 0; ; i++ {
			if _, err := os.Stat(filepath.Join(devs[0].LogDir(), "swap")); err == nil {
				break
			}
			if i == 500 {
				tenant <- errors.New("never asked to swap")
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		ln, err := net.Listen("unix", filepath.Join(pipe, "mine"))
		if err != nil {
			tenant <- err
			return
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		if err := os.Rename(control, filepath.Join(pipe, "theirs")); err != nil {
			tenant <- err
			return
		}
		if err := os.Rename(filepath.Join(pipe, "mine"), control); err != nil {
			tenant <- err
			return
		}
		if err := unix.Lstat(control, &planted); err != nil {
			tenant <- err
			return
		}
		tenant <- os.WriteFile(filepath.Join(devs[0].LogDir(), "swapped"), nil, 0o644)
	}()
	_, err := m.Start(t.Context(), devs)
	if err := <-tenant; err != nil {
		t.Fatalf("tenant: %v", err)
	}
	if rec, rerr := m.readRecord(devs[0].UUID()); rerr == nil && rec.ControlInode == planted.Ino {
		t.Errorf("the record names the tenant's socket (inode %d) as the daemon's", planted.Ino)
	}
	if err == nil || !strings.Contains(err.Error(), control) {
		t.Errorf("start = %v; want it refused: %s is not the daemon's", err, control)
	}
}
