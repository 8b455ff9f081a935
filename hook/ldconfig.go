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
	if conf := s.ldConf(); conf.Problem != "" {
		s.warn("%s; ldconfig reads the folders of the other files only", conf.Problem)
		args = append(append(args, "-f", "/"), conf.Folders...)
	}
	args = append(args, folders...)
	if err := runLimited(ldconfig, args, l); err != nil {
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

// runLimited runs prog with args under l. The limits are set by a
// re-executed copy of the hook (ExecLimited) in the process that then
// execs prog, so they hold from prog's first instruction: setting them
// with prlimit(2) on a started child would race with it, and Go cannot
// run code between fork and exec.
func runLimited(prog string, args []string, l Limits) error {
	ctx, cancel := context.WithTimeout(context.Background(), l.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.Self, append([]string{ExecLimitedArg,
		strconv.FormatUint(l.Memory, 10), strconv.FormatUint(l.FileSize, 10), prog}, args...)...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The output pipes are ours; a grandchild holding them must not keep
	// the hook waiting past the kill.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("%s %s: killed after %v (a FIFO or device among the image's libraries?)", prog, strings.Join(args, " "), l.Timeout)
	}
	if err != nil {
		msg := strings.Join(strings.Fields(string(bytes.ToValidUTF8(out.b, []byte("?")))), " ")
		return fmt.Errorf("%s %s: %v: %s", prog, strings.Join(args, " "), err, msg)
	}
	return nil
}

// ExecLimited is the re-executed hook's side of runLimited: args are the
// address-space limit, the file-size limit, the program and its
// arguments. It sets the limits and execs the program with an empty
// environment; it returns only on failure.
func ExecLimited(args []string) error {
	if len(args) < 3 {
		return errors.New("usage: " + ExecLimitedArg + " MEMORY FILESIZE PROGRAM [ARG...]")
	}
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
