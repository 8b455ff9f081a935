package runtime

import (
	"strconv"
	"strings"
)

// invocation is what gpuctk-runtime needs to know of its command line; the
// command line itself is passed on to the real runtime untouched.
type invocation struct {
	command   string
	logFile   string // runc's global --log
	logFormat string // runc's global --log-format: text or json
	debug     bool   // runc's global --debug
	version   bool   // runc's global --version or -v
	help      bool   // runc's --help or -h, global or create's

	// Of create only.
	bundle string
	id     string
}

// globalValueFlag says whether runc's or crun's global option name takes
// a value; the others are booleans.
func globalValueFlag(name string) bool {
	switch name {
	case "log", "log-format", "root", "criu", "rootless", "cgroup-manager", "log-level":
		return true
	}
	return false
}

// createValueFlag says whether runc create's option name takes a value.
func createValueFlag(name string) bool {
	switch name {
	case "bundle", "b", "console-socket", "pid-file", "preserve-fds", "pidfd-socket":
		return true
	}
	return false
}

// boolFlag is the value of a boolean option as Go's flag package, runc's,
// reads it: set without a value, else strconv.ParseBool's (runc refuses
// what that does not take).
func boolFlag(hasVal bool, val string) bool {
	if !hasVal {
		return true
	}
	on, _ := strconv.ParseBool(val)
	return on
}

// VersionRequested says whether args ask for the version (runc's global
// --version or -v), which runc prints instead of running a command.
func VersionRequested(args []string) bool {
	return parseArgs(args).version
}

// parseArgs reads runc's command line: global options, the command, the
// command's options and arguments. Like runc (urfave/cli), it accepts one
// or two leading dashes and "--name=value".
func parseArgs(args []string) invocation {
	var inv invocation
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if globalValueFlag(name) && !hasVal && i+1 < len(args) {
			i++
			val = args[i]
		}
		switch name {
		case "log":
			inv.logFile = val
		case "log-format":
			inv.logFormat = val
		case "debug":
			inv.debug = boolFlag(hasVal, val)
		case "version", "v":
			inv.version = boolFlag(hasVal, val)
		case "help", "h":
			inv.help = boolFlag(hasVal, val)
		}
	}
	if i < len(args) && args[i] == "--" {
		i++
	}
	if i >= len(args) {
		return inv
	}
	inv.command = args[i]
	if inv.command != "create" {
		return inv
	}
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" {
			if j+1 < len(rest) && inv.id == "" {
				inv.id = rest[j+1]
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if inv.id == "" {
				inv.id = a
			}
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if createValueFlag(name) && !hasVal && j+1 < len(rest) {
			j++
			val = rest[j]
		}
		switch name {
		case "bundle", "b":
			inv.bundle = val
		case "help", "h":
			inv.help = boolFlag(hasVal, val)
		}
	}
	return inv
}
