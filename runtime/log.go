package runtime

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/gpuctk/gpuctk/internal/quote"
)

// logger appends entries to the configured log file (text) and to runc's
// --log file in the format runc writes there, so containerd's shim, which
// reports the last entry at level "error", reports ours. Files open on the
// first entry: the pass-through path never touches them.
type logger struct {
	sinks []*sink
	debug bool
	quiet bool // errors only
}

type sink struct {
	path string
	json bool
	// own is the configured log file: never followed through a symlink.
	// runc's --log is the engine's choice; it may also be a FIFO that the
	// engine reads.
	own bool
	f   *os.File
	bad bool
}

// maxMessage bounds one entry's message, in bytes: a message quotes
// values from config.json, which the image controls.
const maxMessage = 4096

func newLogger(ownFile string, inv invocation, level string) *logger {
	l := &logger{debug: inv.debug || level == "debug", quiet: level == "error"}
	if ownFile != "" {
		l.sinks = append(l.sinks, &sink{path: ownFile, own: true})
	}
	if inv.logFile != "" && inv.logFile != ownFile {
		l.sinks = append(l.sinks, &sink{path: inv.logFile, json: inv.logFormat == "json"})
	}
	return l
}

func (l *logger) Debugf(format string, a ...any) {
	if l.debug {
		l.write("debug", format, a...)
	}
}

func (l *logger) Infof(format string, a ...any) {
	if !l.quiet {
		l.write("info", format, a...)
	}
}

func (l *logger) Warnf(format string, a ...any) {
	if !l.quiet {
		l.write("warning", format, a...)
	}
}

func (l *logger) Errorf(format string, a ...any) { l.write("error", format, a...) }

func (l *logger) write(level, format string, a ...any) {
	msg := format
	if len(a) > 0 {
		msg = fmt.Sprintf(format, a...)
	}
	msg = quote.Clip(msg, maxMessage)
	now := time.Now().UTC().Format(time.RFC3339Nano) // UTC: no time zone file to read on every create
	for _, s := range l.sinks {
		if s.bad {
			continue
		}
		if s.f == nil {
			f, err := s.open()
			if err != nil {
				// Nowhere to say it; the caller still sees errors on stderr.
				s.bad = true
				continue
			}
			s.f = f
		}
		var line []byte
		if s.json {
			line, _ = json.Marshal(struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
				Time  string `json:"time"`
			}{level, msg, now})
		} else {
			line = []byte("time=" + strconv.Quote(now) + " level=" + level + " msg=" + strconv.Quote(msg))
		}
		s.f.Write(append(line, '\n'))
	}
}

// Close closes the files before the exec.
func (l *logger) Close() {
	for _, s := range l.sinks {
		if s.f != nil {
			s.f.Close()
			s.f = nil
		}
	}
}

// open opens the log without blocking (a FIFO without a reader would hang
// every create) and accepts only a regular file, or for runc's --log a
// FIFO: a symlink, a device node or a folder planted at the path gets
// nothing.
func (s *sink) open() (*os.File, error) {
	flags := os.O_WRONLY | os.O_APPEND | os.O_CREATE | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if s.own {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(s.path, flags, 0o640)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() && (s.own || fi.Mode().Type() != fs.ModeNamedPipe) {
		err = fmt.Errorf("log %s is a %v, not a regular file", s.path, fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// LogLevelFromEnv reads the log level from GPUCTK_LOG_LEVEL (debug, info,
// error), else GPUCTK_DEBUG or GPUCTK_QUIET set to a true value: the
// runtime is started by an engine with fixed arguments, and runc's flags
// are runc's, so the environment is where a user can ask. "" when none
// is set.
func LogLevelFromEnv(getenv func(string) string) (string, error) {
	if v := getenv("GPUCTK_LOG_LEVEL"); v != "" {
		for _, l := range LogLevels {
			if v == l {
				return v, nil
			}
		}
		return "", fmt.Errorf("GPUCTK_LOG_LEVEL=%q is not a log level: use debug, info or error (ignored)", v)
	}
	for _, e := range []struct{ name, level string }{{"GPUCTK_DEBUG", "debug"}, {"GPUCTK_QUIET", "error"}} {
		v := getenv(e.name)
		if v == "" {
			continue
		}
		on, err := strconv.ParseBool(v)
		if err != nil {
			return "", fmt.Errorf("%s=%q is not true or false (ignored)", e.name, v)
		}
		if on {
			return e.level, nil
		}
	}
	return "", nil
}
