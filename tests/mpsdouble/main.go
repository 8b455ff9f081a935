// Command mpsdouble is a test double of nvidia-cuda-mps-control, for
// machines without a GPU. Tests build it and install it into a fake driver
// root as usr/bin/nvidia-cuda-mps-control.
//
// Like the real binary, `-d` starts a daemon that listens on the
// SOCK_SEQPACKET unix sockets control (for any user) and
// control_privileged (for root) in $CUDA_MPS_PIPE_DIRECTORY (default
// /tmp/nvidia-mps), writes its pid to nvidia-cuda-mps-control.pid there and
// logs to control.log in $CUDA_MPS_LOG_DIRECTORY (default
// /var/log/nvidia-mps); without -d it sends each line of stdin to the
// daemon as a command and prints the answers: the commands that change the
// daemon (set_*, quit) through control_privileged, the others through
// control. It knows set_default_active_thread_percentage,
// get_default_active_thread_percentage, set_default_device_pinned_mem_limit,
// get_default_device_pinned_mem_limit and quit.
//
// For the tests to check, the daemon records in mpsdouble.json in the log
// folder its environment, the defaults it was given, and the device
// number of its /dev/shm; and it creates /dev/shm/mpsdouble holding
// $CUDA_VISIBLE_DEVICES, removed when it quits. A file
// mpsdouble.ignore-quit in the log folder makes it ignore quit.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
)

const (
	serveArg = "--mpsdouble-serve"
	pidFile  = "nvidia-cuda-mps-control.pid"
	// Marker is the file the daemon keeps in its /dev/shm.
	Marker = "mpsdouble"
	// IgnoreQuit, in the log folder, makes the daemon ignore quit, as a
	// hung daemon would.
	IgnoreQuit = "mpsdouble.ignore-quit"
)

// Record is what the daemon writes to mpsdouble.json.
type Record struct {
	PID                    int               `json:"pid"`
	CUDAVisibleDevices     string            `json:"cudaVisibleDevices"`
	Env                    []string          `json:"env"`
	ShmDev                 uint64            `json:"shmDev"`
	ActiveThreadPercentage float64           `json:"activeThreadPercentage"`
	PinnedMemLimits        map[string]string `json:"pinnedMemLimits"`
	Commands               []string          `json:"commands"`
}

func main() {
	var err error
	switch {
	case len(os.Args) == 2 && os.Args[1] == "-d":
		err = daemonise()
	case len(os.Args) == 2 && os.Args[1] == serveArg:
		err = serve()
	case len(os.Args) == 1:
		err = client(os.Stdin, os.Stdout)
	default:
		err = errors.New("usage: nvidia-cuda-mps-control [-d]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func pipeDir() string { return getenv("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps") }
func logDir() string  { return getenv("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps") }
func socket() string  { return filepath.Join(pipeDir(), "control") }

// privileged is the socket for the commands that change the daemon.
func privileged() string { return filepath.Join(pipeDir(), "control_privileged") }

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// daemonise starts the daemon in its own session and returns at once, as
// the real -d does: the daemon is not answering yet when it returns.
func daemonise() error {
	if c, err := net.Dial("unixpacket", socket()); err == nil {
		c.Close()
		return errors.New("An instance of this daemon is already running")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, serveArg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}

type daemon struct {
	mu     sync.Mutex
	rec    Record
	log    *os.File
	ln     net.Listener
	priv   net.Listener
	marker string
}

func serve() error {
	if err := os.MkdirAll(pipeDir(), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(logDir(), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(logDir(), "control.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	os.Remove(socket())
	ln, err := net.Listen("unixpacket", socket())
	if err != nil {
		return err
	}
	os.Remove(privileged())
	priv, err := net.Listen("unixpacket", privileged())
	if err != nil {
		return err
	}
	if err := os.Chmod(privileged(), 0o755); err != nil {
		return err
	}
	d := &daemon{log: logf, ln: ln, priv: priv, marker: filepath.Join("/dev/shm", Marker)}
	d.rec = Record{
		PID:                    os.Getpid(),
		CUDAVisibleDevices:     os.Getenv("CUDA_VISIBLE_DEVICES"),
		Env:                    os.Environ(),
		ActiveThreadPercentage: 100,
		PinnedMemLimits:        map[string]string{},
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/dev/shm", &st); err == nil {
		d.rec.ShmDev = st.Dev
	}
	if err := os.WriteFile(d.marker, []byte(d.rec.CUDAVisibleDevices+"\n"), 0o644); err != nil {
		d.logf("cannot write %s: %v", d.marker, err)
	}
	if err := d.save(); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(pipeDir(), pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	d.logf("Startup, CUDA_VISIBLE_DEVICES=%s", d.rec.CUDAVisibleDevices)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		d.exit()
	}()
	go d.accept(priv)
	return d.accept(ln)
}

func (d *daemon) accept(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go d.handle(c)
	}
}

func (d *daemon) logf(format string, args ...any) {
	fmt.Fprintf(d.log, "[%s] %s\n", time.Now().Format("2006-01-02 15:04:05.000"), fmt.Sprintf(format, args...))
}

func (d *daemon) save() error {
	data, err := json.MarshalIndent(d.rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(logDir(), "mpsdouble.json"), data, 0o644)
}

func (d *daemon) handle(c net.Conn) {
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return
	}
	cmd := strings.Fields(line)
	if len(cmd) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logf("Cmd: %s", strings.Join(cmd, " "))
	d.rec.Commands = append(d.rec.Commands, strings.Join(cmd, " "))
	answer := ""
	switch cmd[0] {
	case "get_default_active_thread_percentage":
		answer = strconv.FormatFloat(d.rec.ActiveThreadPercentage, 'f', 1, 64)
	case "set_default_active_thread_percentage":
		p, err := strconv.ParseFloat(arg(cmd, 1), 64)
		if err != nil || p <= 0 || p > 100 {
			answer = "Invalid active thread percentage"
			break
		}
		d.rec.ActiveThreadPercentage = p
	case "set_default_device_pinned_mem_limit":
		if len(cmd) != 3 {
			answer = "Usage: set_default_device_pinned_mem_limit <dev> <value>"
			break
		}
		d.rec.PinnedMemLimits[cmd[1]] = cmd[2]
	case "get_default_device_pinned_mem_limit":
		if v, ok := d.rec.PinnedMemLimits[arg(cmd, 1)]; ok {
			answer = v
		} else {
			answer = "N/A"
		}
	case "quit":
		if _, err := os.Stat(filepath.Join(logDir(), IgnoreQuit)); err == nil {
			break // playing a hung daemon
		}
		d.save()
		c.Close()
		d.exit()
	default:
		answer = "Unrecognized command: " + cmd[0]
	}
	if err := d.save(); err != nil {
		d.logf("save: %v", err)
	}
	if answer != "" {
		io.WriteString(c, answer+"\n")
	}
}

func arg(cmd []string, i int) string {
	if i < len(cmd) {
		return cmd[i]
	}
	return ""
}

// exit stops listening and removes the socket, pid file and marker.
func (d *daemon) exit() {
	d.ln.Close()
	d.priv.Close()
	os.Remove(filepath.Join(pipeDir(), pidFile))
	os.Remove(d.marker)
	d.logf("Exit")
	os.Exit(0)
}

// client sends each line of in to the daemon and prints the answers.
func client(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		path := socket()
		if f := strings.Fields(line); f[0] == "quit" || strings.HasPrefix(f[0], "set_") {
			path = privileged()
		}
		c, err := net.Dial("unixpacket", path)
		if err != nil {
			return errors.New("Cannot find MPS control daemon process")
		}
		if _, err := io.WriteString(c, line+"\n"); err != nil {
			c.Close()
			return err
		}
		answer, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			return err
		}
		out.Write(answer)
	}
	return sc.Err()
}
