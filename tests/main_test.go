package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// binDir holds the binaries built once for the whole test run.
var binDir string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		// Under CI a root-only test must run, never pass by skipping.
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "tests: the end-to-end tests need root (they run podman, mknod, dpkg): run `make test` as root")
			os.Exit(1)
		}
		fmt.Println("tests: skipped: the end-to-end tests need root (they run podman, mknod, dpkg): run `make test` as root")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "gpuctk-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if fakeNVML != "" {
		os.RemoveAll(filepath.Dir(fakeNVML))
	}
	os.Exit(code)
}

// buildBinaries builds the four shipped binaries as `make build` does.
func buildBinaries(dir string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	for _, b := range []struct {
		name string
		cgo  string
	}{{"gpuctk", "1"}, {"gpuctk-device-plugin", "1"}, {"gpuctk-hook", "0"}, {"gpuctk-runtime", "0"}} {
		args := []string{"build", "-o", filepath.Join(dir, b.name)}
		if b.cgo == "0" {
			// The Makefile's GODEBUG default for the hook and the runtime.
			def, err := exec.Command("go", "list", "-C", root, "-f", "{{.DefaultGODEBUG}}", "./cmd/"+b.name).Output()
			if err != nil {
				return fmt.Errorf("go list %s: %v", b.name, err)
			}
			godebug := strings.TrimSpace(string(def))
			if godebug != "" {
				godebug += ","
			}
			args = append(args, "-ldflags", "-X runtime.godebugDefault="+godebug+"profstackdepth=0")
		}
		cmd := exec.Command("go", append(args, "./cmd/"+b.name)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo, "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", b.name, err, out)
		}
	}
	return nil
}

// bin returns the path of a built binary.
func bin(name string) string { return filepath.Join(binDir, name) }

// run runs a command and fails the test with its output when it fails.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}
