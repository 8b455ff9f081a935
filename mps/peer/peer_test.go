package peer

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// self is the record of a daemon that is this test process.
func self(t *testing.T) Record {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &st); err != nil {
		t.Fatal(err)
	}
	return Record{PID: os.Getpid(), MountNS: st.Ino}
}

func listen(t *testing.T, network, path string) {
	t.Helper()
	l, err := net.Listen(network, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// Socket accepts the daemon's listener, of the type the real
// nvidia-cuda-mps-control uses (SOCK_SEQPACKET) or a stream one, and
// refuses anything else under the name, each with a line that says why.
func TestSocket(t *testing.T) {
	tests := []struct {
		name string
		// make puts something at path and returns the record to check
		// it against.
		make    func(t *testing.T, path string) Record
		wantErr string
		// notDaemon: the error matches ErrNotDaemon.
		notDaemon bool
	}{{
		name: "seqpacket listener",
		make: func(t *testing.T, path string) Record {
			listen(t, "unixpacket", path)
			return self(t)
		},
	}, {
		name: "stream listener",
		make: func(t *testing.T, path string) Record {
			listen(t, "unix", path)
			return self(t)
		},
	}, {
		name: "recorded inode",
		make: func(t *testing.T, path string) Record {
			listen(t, "unixpacket", path)
			r := self(t)
			r.Socket = inode(t, path)
			return r
		},
	}, {
		name: "another socket than the one recorded",
		make: func(t *testing.T, path string) Record {
			listen(t, "unixpacket", path)
			r := self(t)
			r.Socket = inode(t, path) + 1
			return r
		},
		wantErr:   "is not the daemon's socket",
		notDaemon: true,
	}, {
		name: "listener in another mount namespace",
		make: func(t *testing.T, path string) Record {
			listen(t, "unixpacket", path)
			r := self(t)
			r.MountNS++
			return r
		},
		wantErr:   "is not in the daemon's mount namespace",
		notDaemon: true,
	}, {
		name: "listener is not the daemon",
		make: func(t *testing.T, path string) Record {
			listen(t, "unixpacket", path)
			r := self(t)
			r.PID = 1
			return r
		},
		wantErr:   "is not the daemon (pid 1)",
		notDaemon: true,
	}, {
		name: "datagram socket",
		make: func(t *testing.T, path string) Record {
			c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return self(t)
		},
		wantErr: syscall.EPROTOTYPE.Error(),
	}, {
		name: "socket nobody listens on",
		make: func(t *testing.T, path string) Record {
			l, err := net.Listen("unixpacket", path)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
			return self(t)
		},
		wantErr: syscall.ECONNREFUSED.Error(),
	}, {
		name: "link to the daemon's socket",
		make: func(t *testing.T, path string) Record {
			real := filepath.Join(filepath.Dir(path), "real")
			listen(t, "unixpacket", real)
			if err := os.Symlink(real, path); err != nil {
				t.Fatal(err)
			}
			return self(t)
		},
		wantErr:   "is not a socket",
		notDaemon: true,
	}, {
		name: "FIFO",
		make: func(t *testing.T, path string) Record {
			if err := unix.Mkfifo(path, 0o666); err != nil {
				t.Fatal(err)
			}
			return self(t)
		},
		wantErr:   "is not a socket",
		notDaemon: true,
	}, {
		name: "no daemon recorded",
		make: func(t *testing.T, path string) Record {
			listen(t, "unixpacket", path)
			return Record{}
		},
		wantErr: "no daemon is recorded",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "control")
			rec := tt.make(t, path)
			ino, err := Socket(path, rec, time.Second)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Socket: %v", err)
				}
				if want := inode(t, path); ino != want {
					t.Errorf("Socket = inode %d, want %d", ino, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Socket: error %v, want one containing %q", err, tt.wantErr)
			}
			if got := errors.Is(err, ErrNotDaemon); got != tt.notDaemon {
				t.Errorf("errors.Is(%v, ErrNotDaemon) = %v, want %v", err, got, tt.notDaemon)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

// A listener whose backlog is full cannot hold the check past its
// timeout.
func TestSocketFullBacklog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	// Fill the backlog without accepting.
	for range 4 {
		c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(c)
		unix.Connect(c, &unix.SockaddrUnix{Name: path})
	}
	start := time.Now()
	_, err = Socket(path, self(t), 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Fatalf("Socket: error %v, want no answer within 200ms", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Socket returned after %v", d)
	}
}
