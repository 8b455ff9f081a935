package mps

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/config"
)

// tenantSocket listens on path, as a tenant's fake daemon would, and
// answers every command with answer. Its name can be swapped away without
// the listener noticing. close stops it.
func tenantSocket(path, answer string) (close func(), err error) {
	l, err := net.Listen("unixpacket", path)
	if err != nil {
		return nil, err
	}
	ln := l.(*net.UnixListener)
	ln.SetUnlinkOnClose(false)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, answer+"\n")
				c.Close()
			}()
		}
	}()
	return func() { ln.Close() }, nil
}

// swapper is a tenant running as root without a user namespace: once the
// daemon's socket name holds a socket other than the one whose inode is
// old, it plants a socket of its own and keeps exchanging the two names
// (renameat2 RENAME_EXCHANGE, which the sticky bit does not stop for
// root), until stopped.
type swapper struct {
	stop  chan struct{}
	done  chan struct{}
	swaps atomic.Int64
	err   error
}

func swap(pipe, name string, old uint64) *swapper {
	s := &swapper{stop: make(chan struct{}), done: make(chan struct{})}
	theirs, mine := filepath.Join(pipe, name), filepath.Join(pipe, "mine")
	go func() {
		defer close(s.done)
		planted := false
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			if !planted {
				var st unix.Stat_t
				if unix.Lstat(theirs, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Ino == old {
					continue
				}
				stop, err := tenantSocket(mine, "50.0")
				if err != nil {
					s.err = err
					return
				}
				defer stop()
				planted = true
			}
			if unix.Renameat2(unix.AT_FDCWD, mine, unix.AT_FDCWD, theirs, unix.RENAME_EXCHANGE) == nil {
				s.swaps.Add(1)
			}
		}
	}()
	return s
}

// end stops the tenant and returns how many swaps it made.
func (s *swapper) end(t *testing.T) int64 {
	t.Helper()
	close(s.stop)
	<-s.done
	if s.err != nil {
		t.Fatalf("tenant: %v", s.err)
	}
	return s.swaps.Load()
}

func inode(path string) uint64 {
	var st unix.Stat_t
	unix.Lstat(path, &st)
	return st.Ino
}

// A hung daemon is not answering, whatever a tenant swaps in under the
// control socket's name between gpuctk's check of the socket and the
// control client's connect: the client reaches only the socket checked.
func TestStatusSocketSwap(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""), WithTimeout(300*time.Millisecond))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
	res, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	pid := res[0].PID
	syscall.Kill(pid, syscall.SIGSTOP)
	defer syscall.Kill(pid, syscall.SIGCONT)
	s := swap(devs[0].PipeDir(), "control", 0)
	n := 0
	for range 20 {
		if st, err := m.Status(t.Context(), devs); err == nil && st[0].Answering {
			n++
		}
	}
	if swaps := s.end(t); swaps == 0 {
		t.Fatal("the tenant made no swap")
	}
	if n > 0 {
		t.Errorf("a hung daemon was reported answering in %d of 20 status calls: the tenant's socket answered", n)
	}
}

// When start restarts a daemon that died, the pipe folder its tenants
// share is kept. A tenant swapping its own socket in under the name of
// either of the daemon's sockets must not get the commands that set the
// daemon's limits: a start that reports success has set them on the
// daemon. (It may fail: a tenant can deny MPS to its own device.)
func TestStartSocketSwap(t *testing.T) {
	for _, name := range []string{"control", "control_privileged"} {
		t.Run(name, func(t *testing.T) {
			m, state := newManager(t, driverRootWith(t, ""), WithTimeout(2*time.Second))
			devs := dgxDevices(t, state, config.Sharing{Devices: []string{"2"}, Strategy: config.MPS, Replicas: 2})
			d := devs[0]
			res, err := m.Start(t.Context(), devs)
			if err != nil {
				t.Fatal(err)
			}
			var swaps int64
			started := 0
			for i := range 10 {
				old := inode(filepath.Join(d.PipeDir(), name))
				if err := m.kill(d, res[0].PID); err != nil {
					t.Fatal(err)
				}
				// The tenant swaps from the moment the new daemon has
				// made its socket.
				s := swap(d.PipeDir(), name, old)
				res, err = m.Start(t.Context(), devs)
				swaps += s.end(t)
				os.Remove(filepath.Join(d.PipeDir(), "mine"))
				if err != nil {
					t.Logf("run %d: start: %v", i, err)
					if res, err = m.Start(t.Context(), devs); err != nil {
						t.Fatal(err)
					}
					continue
				}
				started++
				rec := readRecord(t, state, d.UUID())
				if res[0].Action == "started" && (rec.ActiveThreadPercentage != 50 || rec.PinnedMemLimits["0"] == "") {
					t.Errorf("run %d: start reported %s (pid %d) while the daemon's defaults are %v%% and %v: commands %q",
						i, res[0].Action, res[0].PID, rec.ActiveThreadPercentage, rec.PinnedMemLimits, rec.Commands)
				}
			}
			if swaps == 0 {
				t.Fatal("the tenant made no swap")
			}
			if started == 0 {
				t.Error("no start succeeded: nothing to judge (gpuctk checks afresh when a name holds another socket)")
			}
			t.Logf("%d of 10 starts succeeded, %d swaps", started, swaps)
		})
	}
}
