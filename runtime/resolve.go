package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ResolveCommand is the hidden gpuctk command that prints the cache entry
// of the spec dirs as the CDI library resolves them: gpuctk-runtime runs
// it for the specs it does not read itself, so that it does not link the
// library (see edits.go).
var ResolveCommand = []string{"cdi", "resolve"}

// resolveTimeout bounds the child: the library reads a large host's
// specs in tens of milliseconds.
const resolveTimeout = 30 * time.Second

// resolveChild runs `gpuctk cdi resolve --spec-dir DIR...`, gpuctk found
// next to this binary, else on PATH or in the system folders.
func resolveChild(dirs []string) ([]byte, error) {
	gpuctk, err := findGpuctk()
	if err != nil {
		return nil, fmt.Errorf("the CDI specs in %s are not only gpuctk's own spec, and reading them needs the gpuctk command: %w",
			strings.Join(dirs, ", "), err)
	}
	args := append([]string(nil), ResolveCommand...)
	for _, d := range dirs {
		args = append(args, "--spec-dir", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, gpuctk, args...)
	// Nothing of the container engine's environment: GPUCTK_ variables
	// would set the child's flags.
	cmd.Env = []string{"PATH=" + systemDirs}
	stdout, stderr := &cappedBuffer{max: maxCacheFile}, &cappedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	if err != nil {
		msg := strings.TrimSpace(stderr.buf.String())
		if msg != "" {
			err = fmt.Errorf("%w: %s", err, strings.ReplaceAll(msg, "\n", "; "))
		}
		return nil, fmt.Errorf("%s %s: %w", gpuctk, strings.Join(ResolveCommand, " "), err)
	}
	if stdout.over {
		return nil, fmt.Errorf("%s %s printed more than the %d MiB of resolved devices gpuctk-runtime reads: remove specs from %s",
			gpuctk, strings.Join(ResolveCommand, " "), maxCacheFile>>20, strings.Join(dirs, ", "))
	}
	if !whole(stdout.buf.Bytes()) {
		return nil, fmt.Errorf("%s %s printed no resolved devices this gpuctk-runtime reads (install the gpuctk of the same version)",
			gpuctk, strings.Join(ResolveCommand, " "))
	}
	return stdout.buf.Bytes(), nil
}

// findGpuctk returns the gpuctk installed beside this binary, else the
// first on PATH or in the system folders.
func findGpuctk() (string, error) {
	var where string
	if exe, err := os.Executable(); err == nil {
		where = filepath.Dir(exe)
		p := filepath.Join(where, "gpuctk")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("gpuctk"); err == nil {
		return p, nil
	}
	for d := range strings.SplitSeq(systemDirs, ":") {
		if p, err := exec.LookPath(filepath.Join(d, "gpuctk")); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("gpuctk is not in %s, on PATH or in %s: install gpuctk beside gpuctk-runtime", where, systemDirs)
}

// cappedBuffer keeps the first max bytes written to it and says whether
// more came. It is an io.Writer and nothing else: a buffer with a
// ReadFrom (bytes.Buffer's) would let io.Copy, which exec.Cmd uses to fill
// it, read past the cap.
type cappedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.buf.Write(p[:max(room, 0)])
		b.over = true
		return len(p), nil
	}
	return b.buf.Write(p)
}
