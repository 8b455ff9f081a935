// Package peer tells whether the control socket in an MPS pipe folder is
// served by the daemon gpuctk started, reads what gpuctk records of that
// daemon, and names what a replica's edits put in a container. The pipe
// folder is bind-mounted read-write into every replica container, so
// whatever sits there may have been planted by a tenant: a link, a FIFO,
// a socket of its own. Both gpuctk and gpuctk-hook (which must link
// nothing but the standard library and x/sys) use it.
package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Record is the part of <state-root>/<uuid>/device.json that identifies
// the daemon: its pid, once it answered, and the inode number of the mount
// namespace gpuctk made for it. No tenant can enter that namespace, so a
// process in it is the daemon or one of its children.
type Record struct {
	PID     int    `json:"daemonPID,omitempty"`
	MountNS uint64 `json:"daemonMountNS,omitempty"`
	// Socket is the inode number of the daemon's control socket, recorded
	// once gpuctk checked its listener. A bound socket's inode belongs to
	// its listener alone, so it identifies the daemon where its pid cannot
	// be seen: createContainer hooks run in the container's pid namespace.
	Socket uint64 `json:"controlInode,omitempty"`
}

// ErrNotDaemon is what the errors of Check, Socket and SocketFD match
// (errors.Is) when the name holds something other than the daemon's
// socket: another socket, or not a socket. A tenant that swaps names in
// the pipe folder causes them; a check made afresh may pass.
var ErrNotDaemon = errors.New("not the daemon's socket")

type notDaemon string

func (e notDaemon) Error() string        { return string(e) }
func (e notDaemon) Is(target error) bool { return target == ErrNotDaemon }

// maxRecord bounds what ReadRecord reads: a record is well under 4 KiB.
const maxRecord = 1 << 20

// ReadRecord reads the daemon's record at path without following a link,
// blocking on a FIFO or reading more than 1 MiB.
func ReadRecord(path string) (Record, error) {
	var r Record
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return r, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return r, err
	}
	if !fi.Mode().IsRegular() {
		return r, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return r, err
	}
	if len(data) > maxRecord {
		return r, fmt.Errorf("%s is over %d bytes", path, maxRecord)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Check connects to the unix socket at path, without following a link in
// its last element and within timeout, and checks that the process
// listening is the daemon rec describes: in its mount namespace and, when
// rec has a pid, that pid or its child; then hangs up. Plain system calls,
// not package net, whose start-up work gpuctk-hook would pay at every
// container start.
func Check(path string, rec Record, timeout time.Duration) error {
	_, err := Socket(path, rec, timeout)
	return err
}

// Socket checks the socket at path as Check does and returns its inode
// number: that of the socket whose listener was checked, whatever holds
// the name by the time Socket returns.
func Socket(path string, rec Record, timeout time.Duration) (uint64, error) {
	if rec.MountNS == 0 {
		return 0, errors.New("no daemon is recorded")
	}
	// O_PATH opens nothing: a FIFO or a device costs nothing here.
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return SocketFD(fd, path, rec, timeout)
}

// SocketFD checks, as Socket does, the file that fd (opened with O_PATH,
// not following a link) holds, named path in messages, and returns its
// inode number. The caller keeps fd: whatever it does with it afterwards
// (a bind mount) reaches the socket checked, not what holds its name.
func SocketFD(fd int, path string, rec Record, timeout time.Duration) (uint64, error) {
	if rec.MountNS == 0 {
		return 0, errors.New("no daemon is recorded")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return 0, notDaemon(fmt.Sprintf("%s is not a socket", path))
	}
	if rec.Socket != 0 && st.Ino != rec.Socket {
		return 0, notDaemon(fmt.Sprintf("%s is not the daemon's socket", path))
	}
	// nvidia-cuda-mps-control listens on SOCK_SEQPACKET sockets. A
	// listener of another type refuses that with EPROTOTYPE; a stream one
	// is tried next (a driver that used one would still be found), and
	// like any listener judged by its peer.
	sock, err := connect(fd, unix.SOCK_SEQPACKET, timeout)
	if errors.Is(err, unix.EPROTOTYPE) {
		sock, err = connect(fd, unix.SOCK_STREAM, timeout)
	}
	if errors.Is(err, unix.EAGAIN) {
		err = fmt.Errorf("no answer within %v", timeout)
	}
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", path, err)
	}
	defer unix.Close(sock)
	cred, err := unix.GetsockoptUcred(sock, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0, fmt.Errorf("%s: SO_PEERCRED: %w", path, err)
	}
	// pid 0: the listener is outside our pid namespace; then only the
	// recorded socket inode, checked above, vouches for it.
	if pid := int(cred.Pid); pid != 0 || rec.Socket == 0 {
		if err := check(pid, rec); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	return st.Ino, nil
}

// connect connects a new socket of type typ to the socket fd holds.
// Through the descriptor, it reaches the socket fd holds, whatever
// replaces its name meanwhile.
func connect(fd, typ int, timeout time.Duration) (int, error) {
	sock, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	// A listener whose backlog is full keeps connect waiting: for at most
	// the send timeout, which Linux applies to a unix socket's connect.
	tv := unix.NsecToTimeval(max(timeout, time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		unix.Close(sock)
		return -1, err
	}
	err = ignoringEINTR(func() error {
		return unix.Connect(sock, &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(fd)})
	})
	if err != nil {
		unix.Close(sock)
		return -1, err
	}
	return sock, nil
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

// check tells whether pid is the recorded daemon (or its child, in its
// mount namespace).
func check(pid int, rec Record) error {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/mnt", pid), &st); err != nil {
		return fmt.Errorf("its listener (pid %d): %w", pid, err)
	}
	if st.Ino != rec.MountNS {
		return notDaemon(fmt.Sprintf("its listener (pid %d) is not in the daemon's mount namespace", pid))
	}
	if rec.PID == 0 || pid == rec.PID || parent(pid) == rec.PID {
		return nil
	}
	return notDaemon(fmt.Sprintf("its listener (pid %d) is not the daemon (pid %d)", pid, rec.PID))
}

// parent returns pid's parent, 0 when unknown.
func parent(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The name, in parentheses, may hold spaces: fields follow the last ')'.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
