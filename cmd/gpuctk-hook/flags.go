package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpuctk/gpuctk/hook"
)

const usage = `Usage: gpuctk-hook SUBCOMMAND [FLAGS]

The createContainer hook that gpuctk's CDI specs run; container runtimes
call it with the OCI state on stdin.

Subcommands:
  setup      make the driver libraries' links and add them to the
             container's linker cache
               --link TARGET::/LINK   a link to make (repeatable)
               --library /PATH        a library to add to the cache (repeatable)
               --folder /DIR          a library folder for ldconfig (repeatable)
               --ldconfig PATH        the host's ldconfig (default ` + hook.DefaultLdconfig + `)
               --ldconfig-timeout D   kill ldconfig after D (default 10s)
  mps-check  refuse the container when its MPS daemon is not running
               --pipe-dir DIR --uuid UUID
  version    print the version

Unknown subcommands and flags are warned about and ignored, so a spec from
a newer gpuctk keeps working.
`

// run runs the hook with args (without the program name) and returns the
// process exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, version string) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "gpuctk-hook: no subcommand: this program is run by container runtimes from a CDI spec (--help says more)")
		return 2
	}
	env := &hook.Env{Stdin: stdin, Stderr: stderr}
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
		err = parseSetup(stderr, args[1:], &o)
		if errors.Is(err, errHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		if err == nil {
			err = hook.Setup(env, o)
		}
	default:
		var known bool
		if known, err = hook.Run(env, args[0], args[1:]); !known {
			fmt.Fprintf(stderr, "gpuctk-hook: warning: unknown subcommand %q ignored (spec from a newer gpuctk?)\n", args[0])
			return 0
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuctk-hook %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// errHelp is parseSetup's answer to --help.
var errHelp = errors.New("help requested")

// parseSetup parses setup's "--name value" and "--name=value" flags into
// o. An unknown flag is warned about and skipped with its value, so newer
// specs keep working with this hook.
func parseSetup(stderr io.Writer, args []string, o *hook.SetupOptions) error {
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "--") {
			return fmt.Errorf("unexpected argument %q", args[i])
		}
		name, value, hasValue := strings.Cut(args[i][2:], "=")
		if name == "help" {
			return errHelp
		}
		if !hasValue {
			if i+1 >= len(args) {
				return fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			value = args[i]
		}
		switch name {
		case "link":
			o.Links = append(o.Links, value)
		case "library":
			o.Libraries = append(o.Libraries, value)
		case "folder":
			o.Folders = append(o.Folders, value)
		case "ldconfig":
			o.Ldconfig = value
		case "ldconfig-timeout":
			d, err := time.ParseDuration(value)
			if err != nil || d <= 0 {
				return fmt.Errorf("--ldconfig-timeout %q: want a positive duration such as 10s", value)
			}
			o.Limits.Timeout = d
		default:
			fmt.Fprintf(stderr, "gpuctk-hook: warning: unknown flag --%s ignored\n", name)
		}
	}
	return nil
}
