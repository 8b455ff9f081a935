package hook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/internal/jsonobj"
)

// Env is what an operation runs with: the OCI state on Stdin (read on
// first use) and Stderr for warnings.
type Env struct {
	Stdin  io.Reader
	Stderr io.Writer
	// Debug adds what the hook does to Stderr; Quiet leaves only
	// failures there. Runtimes keep a hook's stderr in their log.
	Debug, Quiet bool
	state        *state
	// ready, workDir and runc report whether the state can be read
	// from Stdin at once, the hook's working directory, whether its
	// parent is runc's init and runc's working directory
	// (bundleFromWorkDir); nil: this process's.
	ready   func() bool
	workDir func() string
	runc    func() (isInit bool, runcDir string)
	// osRoot walks the container root's folders through os.Root, as on
	// kernels without openat2 (tests).
	osRoot bool
}

// debugf writes a debug line when asked for.
func (e *Env) debugf(format string, args ...any) {
	if e.Debug {
		fmt.Fprintf(e.Stderr, "gpuctk-hook: debug: "+format+"\n", args...)
	}
}

type state struct {
	Bundle string `json:"bundle"`
	Pid    int    `json:"pid"`
	ID     string `json:"id"`
}

// Container is what the hook needs of the bundle's config.json.
type Container struct {
	// Bundle is the host path of the container's bundle, which holds its
	// config.json.
	Bundle string
	// Root is the host path of the container's root file system.
	Root string
	// UID and GID own what the hook creates in Root: the host IDs that
	// the container's root maps to, 0 without a user namespace.
	UID, GID int
	// config is the bundle's config.json as read, for what else a
	// subcommand needs of it (CheckMPSContainer).
	config []byte
}

type idMapping struct {
	ContainerID uint32 `json:"containerID"`
	HostID      uint32 `json:"hostID"`
	Size        uint32 `json:"size"`
}

// ContainerRoot returns the host path of the container's root file
// system: the bundle's config.json root.path, relative to the bundle.
func (e *Env) ContainerRoot() (string, error) {
	c, err := e.Container()
	return c.Root, err
}

// Container reads the OCI state on stdin (once) and the bundle's
// config.json: the root path and, for a container with a user namespace,
// the host IDs of its root. Under runc, when the state is not on stdin
// yet, it finds the bundle without it (bundleFromWorkDir).
func (e *Env) Container() (Container, error) {
	// Through package jsonobj, which splits members without reflection:
	// encoding/json's first decode into a struct costs 70 to 100 us of
	// type tables, twice, at every container start.
	if e.state == nil {
		if !e.stateReady() {
			if c, ok := e.bundleFromWorkDir(); ok {
				return c, nil
			}
		}
		data, err := readState(e.Stdin, maxStateSize)
		if err != nil {
			return Container{}, fmt.Errorf("reading the OCI state on stdin: %w", err)
		}
		o, err := jsonobj.Parse(data, "", jsonobj.Fold)
		if err != nil {
			return Container{}, fmt.Errorf("reading the OCI state on stdin: %w", err)
		}
		var s state
		if s.Bundle, _, err = o.String("bundle"); err != nil {
			return Container{}, fmt.Errorf("reading the OCI state on stdin: %w", err)
		}
		if s.Bundle == "" {
			return Container{}, errors.New("the OCI state on stdin has no bundle")
		}
		e.state = &s
	}
	return bundleContainer(e.state.Bundle)
}

// bundleContainer reads what the hook needs of bundle's config.json.
func bundleContainer(bundle string) (Container, error) {
	data, err := readBundleFile(filepath.Join(bundle, "config.json"), maxConfigSize)
	if err != nil {
		return Container{}, fmt.Errorf("bundle: %w", err)
	}
	c, err := containerOf(data)
	if err != nil {
		return Container{}, fmt.Errorf("bundle %s/config.json: %w", bundle, err)
	}
	if c.Root == "" {
		return Container{}, fmt.Errorf("bundle %s/config.json has no root.path", bundle)
	}
	if !filepath.IsAbs(c.Root) {
		c.Root = filepath.Join(bundle, c.Root)
	}
	c.Bundle, c.config = bundle, data
	return c, nil
}

// runcInitName is the name runc's nsexec gives the container's init
// process, which runs createContainer hooks.
const runcInitName = "runc:[2:INIT]"

// bundleFromWorkDir finds the container without the OCI state where runc
// runs the hook. runc (1.1 and later) runs createContainer hooks from the
// container's init process, in the root as working directory; the init
// is a child of runc's own process (nsexec clones it with CLONE_PARENT),
// whose working directory is the bundle (runc moves there before it
// starts the init). The bundle is the root's parent where containerd and
// Docker lay it out, else runc's working directory (podman and CRI-O keep
// the root apart from the bundle), and either is taken only when its
// config.json names this very folder (same device and inode) as the
// root. ok is false everywhere else, and the state is then read from
// stdin. Container asks only when the state is not on stdin yet.
//
// Why not always read the state: runc writes it into the hook's stdin
// from a goroutine of its init process, which runs with one P; the
// goroutine that waits for the hook holds that P in a system call, so the
// writer runs only when Go's sysmon takes the P back, up to 10 ms later
// when the process has been idle (a hook that reads its stdin took 3 to 5
// ms longer under runc 1.1.5 than one that does not, against 0.5 ms
// for /bin/true). runc ignores the write's EPIPE when the hook has exited;
// crun writes the state before it waits, and fails the hook if that
// write fails, so only runc's init is trusted to need no reader.
func (e *Env) bundleFromWorkDir() (Container, bool) {
	workDir, runc := e.workDir, e.runc
	if workDir == nil {
		workDir = processWorkDir
	}
	if runc == nil {
		runc = runcParent
	}
	dir := workDir()
	if !filepath.IsAbs(dir) || dir == "/" {
		return Container{}, false
	}
	// The root's parent first (containerd's layout); runc's folder is
	// read only where that is not the bundle.
	bundle := filepath.Dir(dir)
	c, err := containerAt(bundle, dir)
	if err != nil {
		e.debugf("the state from stdin unless runc says otherwise: %v", err)
	}
	isInit, runcDir := runc()
	if !isInit {
		e.debugf("the state from stdin: the parent process is not runc's init")
		return Container{}, false
	}
	if err != nil {
		if runcDir == "" {
			e.debugf("the state from stdin: runc's working directory cannot be read")
			return Container{}, false
		}
		bundle = runcDir
		if c, err = containerAt(bundle, dir); err != nil {
			e.debugf("the state from stdin: %v", err)
			return Container{}, false
		}
	}
	e.debugf("bundle %s: its config.json's root is the working directory runc runs the hook in; the state on stdin is not read", bundle)
	e.state = &state{Bundle: bundle}
	return c, true
}

// stateReady reports whether the OCI state can be read from Stdin without
// waiting: data, or the end of the pipe, is there (a file always is). A
// hook's stdin not ready is runc's, whose writer may be milliseconds
// away (bundleFromWorkDir); other runtimes write the state before the
// hook gets far.
func (e *Env) stateReady() bool {
	if e.ready != nil {
		return e.ready()
	}
	f, ok := e.Stdin.(*os.File)
	if !ok {
		return true
	}
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err != nil || n > 0
}

// containerAt reads the container of bundle, and fails unless its root
// is the folder dir.
func containerAt(bundle, dir string) (Container, error) {
	c, err := bundleContainer(bundle)
	if err != nil {
		return c, err
	}
	var root, wd unix.Stat_t
	if unix.Stat(c.Root, &root) != nil || unix.Stat(dir, &wd) != nil || root.Dev != wd.Dev || root.Ino != wd.Ino {
		return c, fmt.Errorf("bundle %s/config.json's root %s is not the working directory %s", bundle, c.Root, dir)
	}
	return c, nil
}

// processWorkDir returns the working directory, "" when it has none.
func processWorkDir() string {
	dir, err := unix.Getwd()
	if err != nil {
		return ""
	}
	return dir
}

// runcParent reports whether the parent process is runc's init and, if
// so, the working directory of its parent, runc's own process ("" where
// it cannot be read, as from inside a user namespace). The PIDs and the
// name come from the host's procfs, which is still /proc when runc runs
// createContainer hooks (before the pivot), and gives host PIDs whatever
// PID namespace the container has.
func runcParent() (isInit bool, runcDir string) {
	_, ppid, ok := procStat("/proc/self/stat")
	if !ok {
		return false, ""
	}
	comm, runcPID, ok := procStat("/proc/" + ppid + "/stat")
	if !ok || comm != runcInitName {
		return false, ""
	}
	dir, err := os.Readlink("/proc/" + runcPID + "/cwd")
	if err != nil || !filepath.IsAbs(dir) {
		return true, ""
	}
	return true, dir
}

// procStat reads a process's name and its parent's PID from its
// /proc/PID/stat: "pid (comm) state ppid ...", where comm may hold spaces
// and parentheses.
func procStat(path string) (comm, ppid string, ok bool) {
	stat, err := readBundleFile(path, 4096)
	if err != nil {
		return "", "", false
	}
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", "", false
	}
	f := bytes.Fields(stat[end+1:])
	if len(f) < 2 {
		return "", "", false
	}
	return string(stat[open+1 : end]), string(f[1]), true
}

// containerOf reads a config.json's root.path and, for a container with a
// user namespace, the host IDs of its root.
func containerOf(data []byte) (Container, error) {
	var c Container
	cfg, err := jsonobj.Parse(data, "", jsonobj.Fold)
	if err != nil {
		return c, err
	}
	root, err := cfg.Object("root", jsonobj.Fold)
	if err != nil {
		return c, err
	}
	if c.Root, _, err = root.String("path"); err != nil {
		return c, err
	}
	linux, err := cfg.Object("linux", jsonobj.Fold)
	if err != nil {
		return c, err
	}
	var uids, gids []idMapping
	for key, dst := range map[string]*[]idMapping{"uidMappings": &uids, "gidMappings": &gids} {
		if raw, ok := linux.Get(key); ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return c, fmt.Errorf("%s: %w", linux.MemberPath(key), err)
			}
		}
	}
	// runc and crun run createContainer hooks inside the container's user
	// namespace, as its root: what the hook creates is then the
	// container's already, and the host IDs do not exist there.
	if (len(uids) > 0 || len(gids) > 0) && inInitialUserNS() {
		c.UID, c.GID = hostRoot(uids), hostRoot(gids)
	}
	return c, nil
}

// maxStateSize bounds the OCI state read on stdin: a few hundred bytes,
// more with annotations.
const maxStateSize = 1 << 20

// readState reads the OCI state from r: up to the end of its one JSON
// object, or of r, at most limit bytes. It does not wait for the end of
// r once the object is whole: the runtime may keep the pipe open.
func readState(r io.Reader, limit int) ([]byte, error) {
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= limit {
				return nil, fmt.Errorf("more than %d bytes", limit)
			}
			buf = slices.Grow(buf, min(len(buf), limit-len(buf)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+n]
		if t := bytes.TrimRight(buf, " \t\r\n"); n > 0 && len(t) > 0 && t[len(t)-1] == '}' && jsonobj.Valid(t) {
			return t, nil
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// maxConfigSize bounds the bundle's config.json the hook reads: the
// runtime wrote it, but a spec of a few thousand mounts is well under a
// MiB.
const maxConfigSize = 64 << 20

// readBundleFile reads the runtime's file path, at most limit bytes of it.
// Through plain system calls: os.Open would register the file with Go's
// poller, five more calls for a file read once.
func readBundleFile(path string, limit int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: %w", path, errNotRegular)
	}
	if st.Size > limit {
		return nil, fmt.Errorf("%s is %d bytes, %w of %d bytes", path, st.Size, errTooLarge, limit)
	}
	data := make([]byte, 0, st.Size+1)
	for int64(len(data)) <= limit {
		if len(data) == cap(data) {
			data = slices.Grow(data, min(int(limit)+1-len(data), max(len(data), 512)))
		}
		n, err := unix.Read(fd, data[len(data):cap(data)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return data, nil
		}
		data = data[:len(data)+n]
	}
	return nil, fmt.Errorf("%s grew while read, %w of %d bytes", path, errTooLarge, limit)
}

// inInitialUserNS reports whether the hook runs in the host's user
// namespace, whose uid_map maps every ID to itself.
func inInitialUserNS() bool {
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true
	}
	return strings.Join(strings.Fields(string(data)), " ") == "0 0 4294967295"
}

// hostRoot returns the host ID that container ID 0 maps to; 0 when there
// are no mappings or none covers 0 (files then show as the overflow ID
// inside, still readable).
func hostRoot(m []idMapping) int {
	for _, r := range m {
		if r.ContainerID == 0 && r.Size > 0 {
			return int(r.HostID)
		}
	}
	return 0
}
