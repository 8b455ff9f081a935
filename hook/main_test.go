package hook

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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
	return mainEnv(&Env{Stdin: stdin, Stderr: stderr}, args)
}

// mainEnv is Main with the Env given.
func mainEnv(env *Env, args []string) int {
	stderr := env.Stderr
	var err error
	switch args[0] {
	case "setup":
		var f map[string][]string
		if f, err = flags(env, args[1:], "driver-file", "link", "library", "folder", "ldconfig", "cuda-compat", "nvidia-params", "egl-library"); err == nil {
			o := SetupOptions{DriverFiles: f["driver-file"], Links: f["link"], Libraries: f["library"], Folders: f["folder"], Limits: testLimits}
			if v := f["cuda-compat"]; len(v) > 0 {
				o.CUDACompat = v[len(v)-1]
			}
			if v := f["nvidia-params"]; len(v) > 0 {
				o.Params = v[len(v)-1]
			}
			if v := f["egl-library"]; len(v) > 0 {
				o.EGLLibrary = v[len(v)-1]
			}
			if v := f["ldconfig"]; len(v) > 0 {
				o.Ldconfig = v[len(v)-1]
			}
			err = Setup(env, o)
		}
	case "mps-check":
		var f map[string][]string
		if f, err = flags(env, args[1:], "pipe-dir", "uuid"); err == nil {
			if len(f["pipe-dir"]) != 1 || len(f["uuid"]) != 1 {
				err = errors.New("--pipe-dir and --uuid are each needed once")
			} else {
				err = env.CheckMPSContainer(f["pipe-dir"][0], f["uuid"][0])
			}
		}
	default:
		fmt.Fprintf(stderr, "unknown subcommand %q\n", args[0])
		return 0
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

// flags parses "--name value" pairs. Names in known are collected; an
// unknown one is warned about and skipped with its value, so newer specs
// keep working with this hook. (cmd/gpuctk-hook parses the real ones.)
func flags(e *Env, args []string, known ...string) (map[string][]string, error) {
	out := map[string][]string{}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "--") {
			return nil, fmt.Errorf("unexpected argument %q", args[i])
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			value = args[i]
		}
		ok := false
		for _, k := range known {
			ok = ok || k == name
		}
		if !ok {
			fmt.Fprintf(e.Stderr, "gpuctk-hook: warning: unknown flag --%s ignored\n", name)
			continue
		}
		out[name] = append(out[name], value)
	}
	return out, nil
}
