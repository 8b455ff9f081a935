package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpuctk/gpuctk/hook"
)

const usage = `Usage: gpuctk-hook [--debug|--quiet] SUBCOMMAND [FLAGS]

The createContainer hook that gpuctk's CDI specs run; container runtimes
call it with the OCI state on stdin.

Subcommands:
  setup      make the driver libraries' links and add them to the
             container's linker cache
               --driver-file /FOLDER/NAME::/PATH
                                      the driver's file PATH is NAME in the
                                      folder mounted at FOLDER: PATH becomes
                                      a link to it, over whatever file the
                                      image has there (repeatable)
               --link TARGET::/LINK   a link to make (repeatable)
               --library /PATH        a library to add to the cache (repeatable)
               --folder /DIR          a library folder for ldconfig (repeatable)
               --ldconfig PATH        the host's ldconfig (default ` + hook.DefaultLdconfig + `)
               --ldconfig-timeout D   kill ldconfig after D (default 10s)
               --cuda-compat VERSION  the host driver's version: the image's
                                      /usr/local/cuda/compat libraries of a newer
                                      driver branch come first in the cache
               --nvidia-params PATH   the host's /proc/driver/nvidia/params: the
                                      container's is covered by a read-only copy
                                      saying ModifyDeviceFiles: 0
               --egl-library /PATH    the driver's EGL library: when the container
                                      has it, EGL sees only the container's GPUs
                                      (an application profile in its /etc/nvidia)
  mps-check  refuse the container when its MPS daemon is not running
               --pipe-dir DIR --uuid UUID
  version    print the version

Global flags (before the subcommand), also from the hook's environment:
  --debug    say on stderr what the hook does      [$GPUCTK_DEBUG]
  --quiet    failures only on stderr, no warnings  [$GPUCTK_QUIET]

Unknown subcommands and flags are warned about and ignored, so a spec from
a newer gpuctk keeps working.
`

// run runs the hook with args (without the program name) and returns the
// process exit code.
// getenv reads the hook's environment: the spec's hook entry sets it.
func run(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, version string) int {
	env := &hook.Env{Stdin: stdin, Stderr: stderr}
	for _, e := range []struct {
		name string
		set  *bool
	}{{"GPUCTK_DEBUG", &env.Debug}, {"GPUCTK_QUIET", &env.Quiet}} {
		if v := getenv(e.name); v != "" {
			on, err := strconv.ParseBool(v)
			if err != nil {
				fmt.Fprintf(stderr, "gpuctk-hook: warning: %s=%q is not true or false: ignored\n", e.name, v)
			}
			*e.set = on
		}
	}
	// Global flags, before the subcommand: older specs have none.
	for len(args) > 0 && (args[0] == "--debug" || args[0] == "--quiet") {
		env.Debug, env.Quiet = args[0] == "--debug", args[0] == "--quiet"
		args = args[1:]
	}
	if env.Debug && env.Quiet {
		env.Quiet = false // both asked for: the more telling wins
	}
	warnTo := stderr // where unknown flags are warned about
	if env.Quiet {
		warnTo = io.Discard
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "gpuctk-hook: no subcommand: this program is run by container runtimes from a CDI spec (--help says more)")
		return 2
	}
	var err error
	switch args[0] {
	case "--help", "-h", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "--version", "version":
		fmt.Fprintln(stdout, "gpuctk-hook", version)
		return 0
	case "setup":
		var o hook.SetupOptions
		err = parseSetup(warnTo, args[1:], &o)
		if errors.Is(err, errHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		if err == nil {
			err = hook.Setup(env, o)
		}
	case "mps-check":
		var pipeDir, uuid []string
		err = parseFlags(warnTo, args[1:], map[string]func(string) error{
			"pipe-dir": func(v string) error { pipeDir = append(pipeDir, v); return nil },
			"uuid":     func(v string) error { uuid = append(uuid, v); return nil },
		})
		if err == nil && (len(pipeDir) != 1 || len(uuid) != 1) {
			err = errors.New("--pipe-dir and --uuid are each needed once")
		}
		if errors.Is(err, errHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		if err == nil {
			err = env.CheckMPSContainer(pipeDir[0], uuid[0])
		}
	default:
		if env.Quiet {
			return 0
		}
		fmt.Fprintf(stderr, "gpuctk-hook: warning: unknown subcommand %q ignored (spec from a newer gpuctk?)\n", args[0])
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuctk-hook %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// errHelp is parseSetup's answer to --help.
var errHelp = errors.New("help requested")

// parseSetup parses setup's flags into o.
func parseSetup(stderr io.Writer, args []string, o *hook.SetupOptions) error {
	return parseFlags(stderr, args, map[string]func(string) error{
		"link":          func(v string) error { o.Links = append(o.Links, v); return nil },
		"driver-file":   func(v string) error { o.DriverFiles = append(o.DriverFiles, v); return nil },
		"library":       func(v string) error { o.Libraries = append(o.Libraries, v); return nil },
		"folder":        func(v string) error { o.Folders = append(o.Folders, v); return nil },
		"ldconfig":      func(v string) error { o.Ldconfig = v; return nil },
		"cuda-compat":   func(v string) error { o.CUDACompat = v; return nil },
		"nvidia-params": func(v string) error { o.Params = v; return nil },
		"egl-library":   func(v string) error { o.EGLLibrary = v; return nil },
		"ldconfig-timeout": func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("--ldconfig-timeout %q: want a positive duration such as 10s", v)
			}
			o.Limits.Timeout = d
			return nil
		},
	})
}

// parseFlags parses a subcommand's "--name value" and "--name=value" flags,
// handing each value to its setter. An unknown flag is warned about and
// skipped with its value (or alone, when it comes last without one), so
// newer specs keep working with this hook.
func parseFlags(stderr io.Writer, args []string, set map[string]func(string) error) error {
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "--") {
			return fmt.Errorf("unexpected argument %q", args[i])
		}
		name, value, hasValue := strings.Cut(args[i][2:], "=")
		if name == "help" {
			return errHelp
		}
		f, ok := set[name]
		switch {
		case hasValue:
		case i+1 < len(args):
			i++
			value = args[i]
		case ok: // an unknown one, last without a value, is warned about below
			return fmt.Errorf("flag --%s needs a value", name)
		}
		if !ok {
			fmt.Fprintf(stderr, "gpuctk-hook: warning: unknown flag --%s ignored\n", name)
			continue
		}
		if err := f(value); err != nil {
			return err
		}
	}
	return nil
}
