package hook

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for gpuctk-hook when Setup
// re-executes itself (/proc/self/exe) to start ldconfig under limits.
func TestMain(m *testing.M) {
	MainIfExecLimited(os.Args[1:])
	code := m.Run()
	if hookBinPath != "" {
		os.RemoveAll(filepath.Dir(hookBinPath))
	}
	os.Exit(code)
}

// Main is a test stand-in for cmd/gpuctk-hook's command line, so that the
// tests here drive the operations with the arguments a spec gives.
func Main(args []string, stdin io.Reader, stderr io.Writer) int {
	env := &Env{Stdin: stdin, Stderr: stderr}
	var err error
	switch args[0] {
	case "setup":
		var f map[string][]string
		if f, err = flags(env, args[1:], "link", "library", "folder", "ldconfig"); err == nil {
			o := SetupOptions{Links: f["link"], Libraries: f["library"], Folders: f["folder"], Limits: testLimits}
			if v := f["ldconfig"]; len(v) > 0 {
				o.Ldconfig = v[len(v)-1]
			}
			err = Setup(env, o)
		}
	default:
		var known bool
		if known, err = Run(env, args[0], args[1:]); !known {
			fmt.Fprintf(stderr, "unknown subcommand %q\n", args[0])
			return 0
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpuctk-hook %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// testLimits are the ldconfig child's limits in tests: the defaults but
// for a timeout short enough to test.
var testLimits = Limits{Timeout: 2 * time.Second}
