package runtime

import "strings"

// invocation is what gpuctk-runtime needs to know of its command line; the
// command line itself is passed on to the real runtime untouched.
type invocation struct {
	command   string
	logFile   string // runc's global --log
	logFormat string // runc's global --log-format: text or json
	debug     bool   // runc's global --debug

	// Of create only.
	bundle string
	id     string
}

// runc's global options that take a value; the others are booleans.
var globalValueFlags = map[string]bool{"log": true, "log-format": true, "root": true, "criu": true, "rootless": true}

// runc create's options that take a value.
var createValueFlags = map[string]bool{"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true, "pidfd-socket": true}

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
		if globalValueFlags[name] && !hasVal && i+1 < len(args) {
			i++
			val = args[i]
		}
		switch name {
		case "log":
			inv.logFile = val
		case "log-format":
			inv.logFormat = val
		case "debug":
			inv.debug = !hasVal || val == "true"
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
		if createValueFlags[name] && !hasVal && j+1 < len(rest) {
			j++
			val = rest[j]
		}
		if name == "bundle" || name == "b" {
			inv.bundle = val
		}
	}
	return inv
}
