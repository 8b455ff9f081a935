package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

// logger appends entries to the configured log file (text) and to runc's
// --log file in the format runc writes there, so containerd's shim, which
// reports the last entry at level "error", reports ours. Files open on the
// first entry: the pass-through path never touches them.
type logger struct {
	sinks []*sink
	debug bool
}

type sink struct {
	path string
	json bool
	f    *os.File
	bad  bool
}

func newLogger(ownFile string, inv invocation) *logger {
	l := &logger{debug: inv.debug}
	if ownFile != "" {
		l.sinks = append(l.sinks, &sink{path: ownFile})
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

func (l *logger) Infof(format string, a ...any)  { l.write("info", format, a...) }
func (l *logger) Errorf(format string, a ...any) { l.write("error", format, a...) }

func (l *logger) write(level, format string, a ...any) {
	msg := format
	if len(a) > 0 {
		msg = fmt.Sprintf(format, a...)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano) // UTC: no time zone file to read on every create
	for _, s := range l.sinks {
		if s.bad {
			continue
		}
		if s.f == nil {
			f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
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
