package mps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/mps/peer"
)

// nvidia-cuda-mps-control, run without -d, finds its daemon by name:
// $CUDA_MPS_PIPE_DIRECTORY/control (and control_privileged, for the
// commands that change the daemon). In the shared pipe folder a tenant
// running as root can swap those names with sockets of its own between
// any check of gpuctk's and the client's connect. So the client runs in a
// mount namespace of its own where the pipe folder is a private tmpfs: in
// it, the daemon's sockets, each checked through the descriptor then
// bind-mounted from it, and the daemon's other files as found. Nothing
// outside that namespace can rename, replace or add a name there, and it
// ends with the client.

// viewFile is a name the daemon makes in its pipe folder.
type viewFile struct {
	name string
	// kind is the file type the daemon makes: anything else under the
	// name is left out of the view.
	kind uint32
	// socket: the listener must be the daemon's (a socket that is not
	// fails the command, rather than be left out).
	socket   bool
	required bool
}

// viewFiles are the daemon's files in its pipe folder: its sockets, its
// lock file, the servers' log pipe and its pid file (the client may read
// them; they cannot make it reach another listener).
var viewFiles = []viewFile{
	{name: "control", kind: unix.S_IFSOCK, socket: true, required: true},
	{name: "control_privileged", kind: unix.S_IFSOCK, socket: true},
	{name: "control_lock", kind: unix.S_IFREG},
	{name: "log", kind: unix.S_IFIFO},
	{name: "nvidia-cuda-mps-control.pid", kind: unix.S_IFREG},
}

// pipeView makes, in the calling thread's own mount namespace, the pipe
// folder pipe a private tmpfs holding the daemon's files from the shared
// one, its sockets checked against rec. It is inMountNamespace's setup.
func pipeView(pipe string, rec peer.Record) error {
	dir, err := unix.Open(pipe, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: pipe, Err: err}
	}
	defer unix.Close(dir)
	type found struct {
		name string
		fd   int
	}
	var keep []found
	defer func() {
		for _, f := range keep {
			unix.Close(f.fd)
		}
	}()
	for _, vf := range viewFiles {
		path := filepath.Join(pipe, vf.name)
		fd, err := unix.Openat(dir, vf.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && !vf.required {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		if vf.socket {
			r := rec
			if vf.name != "control" {
				// Only control's inode is recorded.
				r.Socket = 0
			}
			if _, err := peer.SocketFD(fd, path, r, time.Second); err != nil {
				unix.Close(fd)
				return err
			}
		} else {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != vf.kind {
				unix.Close(fd)
				continue
			}
		}
		keep = append(keep, found{vf.name, fd})
	}
	// The client, root, may make files of its own there: a few, small.
	if err := unix.Mount("gpuctk-mps-view", pipe, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=1m,nr_inodes=64,mode=0755"); err != nil {
		return fmt.Errorf("mount a private tmpfs on %s: %w", pipe, err)
	}
	for _, f := range keep {
		target := filepath.Join(pipe, f.name)
		// A file, not a folder, is what a bind mount of a file needs
		// under it, whatever its type.
		fd, err := unix.Open(target, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return &os.PathError{Op: "create", Path: target, Err: err}
		}
		unix.Close(fd)
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(f.fd), target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the daemon's %s: %w", target, err)
		}
	}
	return nil
}
