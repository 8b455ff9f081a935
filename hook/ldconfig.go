package hook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/gpuctk/gpuctk/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// ExecLimitedArg is the first argument that makes the hook's program
// ExecLimited instead of a subcommand.
const ExecLimitedArg = "__exec-limited"

// updateCache rebuilds the container's linker cache with the host's
// ldconfig, chrooted into the container root, with the driver's folders
// added. It runs within l: nothing of the hook's environment reaches it,
// its stdin is /dev/null, and it is killed at the timeout.
func (s *setup) updateCache(ldconfig string, folders []string, l Limits) error {
	// ldconfig creates these when they are missing; under a user
	// namespace they must belong to the container's root like the rest.
	made := map[string]bool{}
	for _, d := range []string{"etc", "var", "var/cache", "var/cache/ldconfig"} {
		if _, err := s.root.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			made[d] = true
		}
	}
	// The image decides whether /etc exists; ldconfig needs it for the cache.
	if err := s.root.MkdirAll("etc", 0o755); err != nil {
		return fmt.Errorf("linker cache: %w", err)
	}
	// -i: never read the image's aux cache (a FIFO there blocks ldconfig);
	// it is only a shortcut past reading the libraries' headers.
	args := []string{"-i", "-r", s.c.Root}
	// ldconfig opens the image's ld.so.conf and its includes with a plain
	// open: a FIFO among them would block it until the timeout. The hook
	// reads them first, within bounds, and where one is unfit gives
	// ldconfig the folders of the others itself and "/" (always a folder,
	// which reads as an empty file) as its configuration.
	var dirs []string
	if conf := s.ldConf(); conf.Problem != "" {
		s.warn("%s; ldconfig reads the folders of the other files only", conf.Problem)
		args = append(args, "-f", "/")
		dirs = conf.Folders
	}
	// After "--": the image's lines are folders whatever they start with
	// ("-r/" or "-C/etc/shadow" would otherwise be options, and ldconfig
	// would write its cache over a host file).
	args = append(append(append(args, "--"), dirs...), folders...)
	if err := runLimited(ldconfig, args, s.c.Root, l); err != nil {
		// ldconfig writes its cache to a temporary file (truncating one
		// there) and renames it; failing half-way (a full root, the
		// file-size limit) it leaves that file in the image. The hooks of
		// a root hold its lock: it is this one's ldconfig's.
		// What is not in the root (a folder swapped for a link out of
		// it) is no file left there; one that stays is said in the same
		// line as the failure, which stays one line.
		for _, p := range []string{"etc/ld.so.cache~", "var/cache/ldconfig/aux-cache~"} {
			if _, lerr := s.root.Lstat(p); lerr != nil {
				continue
			}
			if rerr := s.root.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = fmt.Errorf("%w; /%s it left stays: %v", err, p, rerr)
			}
		}
		return err
	}
	for _, p := range []string{"etc/ld.so.cache", "var/cache/ldconfig/aux-cache"} {
		if _, err := s.root.Lstat(p); err == nil {
			if err := s.chown(p); err != nil {
				return err
			}
		}
	}
	for d := range made {
		if _, err := s.root.Lstat(d); err == nil {
			if err := s.chown(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxOutput is how much of the child's output is kept for the error.
const maxOutput = 4 << 10

// tailBuffer keeps the last maxOutput bytes written to it: a hostile image
// can make ldconfig warn about millions of files.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > maxOutput {
		p = p[len(p)-maxOutput:]
	}
	t.b = append(t.b, p...)
	if len(t.b) > maxOutput {
		t.b = append(t.b[:0], t.b[len(t.b)-maxOutput:]...)
	}
	return n, nil
}

// runLimited runs prog with args under l, in a mount namespace of its
// own where no procfs is mounted at or under root (see detachProc). The
// limits are set by a re-executed copy of the hook (ExecLimited) in the
// process that then execs prog, so they hold from prog's first
// instruction: setting them with prlimit(2) on a started child would race
// with it, and Go cannot run code between fork and exec.
func runLimited(prog string, args []string, root string, l Limits) error {
	ctx, cancel := context.WithTimeout(context.Background(), l.Timeout)
	defer cancel()
	var out tailBuffer
	command := func(mounts string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, l.Self, append([]string{ExecLimitedArg, mounts, root,
			strconv.FormatUint(l.Memory, 10), strconv.FormatUint(l.FileSize, 10), prog}, args...)...)
		cmd.Env = []string{}
		cmd.Dir = "/"
		cmd.Stdout, cmd.Stderr = &out, &out
		// The output pipes are ours; a grandchild holding them must not
		// keep the hook waiting past the kill.
		cmd.WaitDelay = time.Second
		return cmd
	}
	// Its own mount namespace, all of it private (Go remounts / so): the
	// procfs mounts it detaches stay in the hook's and the container's.
	cmd := command(privateMounts)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	err := cmd.Start()
	if errors.Is(err, syscall.EPERM) {
		// Not allowed one (a user without CAP_SYS_ADMIN, outside any
		// user namespace): a user namespace of its own, where the hook's
		// user is root, may chroot (ldconfig -r does) and has a mount
		// namespace. What ldconfig writes is still the user's.
		cmd = command(privateMounts)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
		err = cmd.Start()
		if err != nil {
			// Not that either (user namespaces disabled). ldconfig -r
			// that may not chroot goes on without, and then takes
			// some paths as the host's: it replaces an image's file
			// at a library's SONAME because the host has none there.
			if !canChroot() {
				return fmt.Errorf("%s needs to chroot into the container root, and the hook may neither (no CAP_SYS_CHROOT) nor make a user namespace (%v): run the hook as root, or allow user namespaces", prog, err)
			}
			// The child refuses to run where a procfs is mounted under
			// the root, which such a user cannot have mounted.
			cmd = command(sharedMounts)
			err = cmd.Start()
		}
	}
	if err == nil {
		err = cmd.Wait()
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s %s: killed after %v (a FIFO or device among the image's libraries?)", prog, strings.Join(args, " "), l.Timeout)
	}
	if err != nil {
		msg := strings.Join(strings.Fields(string(bytes.ToValidUTF8(out.b, []byte("?")))), " ")
		return fmt.Errorf("%s %s: %v: %s", prog, strings.Join(args, " "), err, msg)
	}
	return nil
}

// canChroot says whether this process may chroot(2): CAP_SYS_CHROOT in
// its effective set.
func canChroot() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_SYS_CHROOT/32].Effective&(1<<(unix.CAP_SYS_CHROOT%32)) != 0
}

// The mount namespace ExecLimited runs in: its own (runLimited unshared
// it), or the hook's.
const (
	privateMounts = "private"
	sharedMounts  = "shared"
)

// ExecLimited is the re-executed hook's side of runLimited: args are the
// mount namespace it is in (privateMounts or sharedMounts), the container
// root, the address-space limit, the file-size limit, the program and its
// arguments. In a namespace of its own it detaches the procfs mounts under
// the root (detachProc); in the hook's it refuses to go on if there are
// any. It then sets the limits and execs the program with an empty
// environment; it returns only on failure.
func ExecLimited(args []string) error {
	if len(args) < 5 || (args[0] != privateMounts && args[0] != sharedMounts) {
		return errors.New("usage: " + ExecLimitedArg + " private|shared ROOT MEMORY FILESIZE PROGRAM [ARG...]")
	}
	if err := detachProc(args[1], args[0] == privateMounts); err != nil {
		return err
	}
	args = args[2:]
	as, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return fmt.Errorf("memory limit: %w", err)
	}
	fsize, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil {
		return fmt.Errorf("file size limit: %w", err)
	}
	// Everything execve needs is built before RLIMIT_AS is lowered: past
	// it, the Go runtime could fail to map memory.
	prog, err := unix.BytePtrFromString(args[2])
	if err != nil {
		return fmt.Errorf("%s: %w", args[2], err)
	}
	argv, err := syscall.SlicePtrFromStrings(args[2:])
	if err != nil {
		return fmt.Errorf("%s: %w", args[2], err)
	}
	envv := []*byte{nil}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: fsize, Max: fsize}); err != nil {
		return fmt.Errorf("RLIMIT_FSIZE: %w", err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: as, Max: as}); err != nil {
		return fmt.Errorf("RLIMIT_AS: %w", err)
	}
	_, _, errno := unix.Syscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(prog)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	return fmt.Errorf("%s: %w", args[2], errno)
}

// detachProc detaches every procfs mounted at or under root from the
// calling process's mount namespace, which must be its own (runLimited's
// child). When the runtime runs createContainer hooks, the container's
// procfs is mounted in the root and its processes (runc init, the hook)
// have the host's root: a /proc/PID/root magic link there leads out of
// the root, and ldconfig, chrooted into it, follows whatever links the
// image plants through one (its aux cache folder, a folder in
// ld.so.conf, a hwcap subfolder), writing its cache and library links on
// the host. ldconfig needs nothing of procfs. Where the process shares the
// hook's namespace (own is false), it unmounts nothing and fails if a
// procfs is there.
func detachProc(root string, own bool) error {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("container root: %w", &fs.PathError{Op: "open", Path: root, Err: err})
	}
	defer unix.Close(fd)
	// The root as mountinfo names it: the kernel's own path of the folder.
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Errorf("container root %s: %w", root, err)
	}
	// Latest first: a mount stacked on another, or on a folder of another,
	// goes before it; a second look says whether any is left.
	for pass := 0; ; pass++ {
		points, err := procMounts(real)
		if err != nil || len(points) == 0 {
			return err
		}
		if !own {
			return fmt.Errorf("container root %s: a procfs is mounted at %s and the hook may not make a mount namespace of its own to run ldconfig without it (run the hook as root, or in a user namespace)", root, points[0])
		}
		if pass == 2 {
			return fmt.Errorf("container root %s: procfs still mounted at %s after unmounting it", root, points[0])
		}
		for i := len(points) - 1; i >= 0; i-- {
			unix.Unmount(points[i], unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
	}
}

// procMounts returns the mount points of the procfs mounts at or under
// root, in /proc/self/mountinfo's order.
func procMounts(root string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var points []string
	for line := range strings.Lines(string(data)) {
		m, ok := mountinfo.Parse(line)
		if ok && m.FSType == "proc" && (m.Point == root || strings.HasPrefix(m.Point, strings.TrimSuffix(root, "/")+"/")) {
			points = append(points, m.Point)
		}
	}
	return points, nil
}

// MainIfExecLimited runs ExecLimited when args (without the program name)
// ask for it, exiting 127 when it fails; otherwise it returns. Programs
// that use Setup call it first thing.
func MainIfExecLimited(args []string) {
	if len(args) == 0 || args[0] != ExecLimitedArg {
		return
	}
	err := ExecLimited(args[1:])
	fmt.Fprintf(os.Stderr, "gpuctk-hook: %v\n", err)
	os.Exit(127)
}
