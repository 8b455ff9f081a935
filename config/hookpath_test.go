package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The spec's hooks carry hook-path as it is, and the OCI runtime spec
// wants a hook's path absolute: a relative one must be refused where the
// file, or a flag, gives it, not surface as containers that fail to start.
func TestHookPathAbsolute(t *testing.T) {
	if _, err := Parse([]byte("[cdi]\nhook-path = \"gpuctk-hook\"\n")); err == nil || !strings.Contains(err.Error(), `"hook-path" "gpuctk-hook" is not an absolute path`) {
		t.Errorf("Parse of a relative hook-path: %v, want an error naming it", err)
	}
	c := Default()
	if err := c.Override(map[string]string{"hook-path": "bin/gpuctk-hook"}); err == nil || !strings.Contains(err.Error(), "hook-path") {
		t.Errorf("--hook-path bin/gpuctk-hook: %v, want an error naming it", err)
	}
	if err := Default().Override(map[string]string{"hook-path": "/opt/gpuctk/gpuctk-hook"}); err != nil {
		t.Error(err)
	}
}

// A relative driver root in the file is refused: the spec would name
// paths under it that runtimes resolve from their own working folder.
// Given as a flag, it is taken from the working folder; host-driver-root,
// a path on another system's side, is refused either way.
func TestRootsAbsolute(t *testing.T) {
	for _, key := range []string{"driver-root", "dev-root", "host-driver-root"} {
		if _, err := Parse([]byte("[cdi]\n" + key + " = \"driver\"\n")); err == nil || !strings.Contains(err.Error(), `"`+key+`" "driver" is not an absolute path`) {
			t.Errorf("Parse of a relative %s: %v, want an error naming it", key, err)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := c.Override(map[string]string{"driver-root": "driver", "dev-root": "./dev/"}); err != nil {
		t.Fatal(err)
	}
	if c.CDI.DriverRoot != filepath.Join(wd, "driver") || c.CDI.DevRoot != filepath.Join(wd, "dev") {
		t.Errorf("--driver-root driver --dev-root ./dev/: %q, %q; want them under %s", c.CDI.DriverRoot, c.CDI.DevRoot, wd)
	}
	if err := Default().Override(map[string]string{"host-driver-root": "host"}); err == nil || !strings.Contains(err.Error(), "host-driver-root") {
		t.Errorf("--host-driver-root host: %v, want an error naming it", err)
	}
	// --library-search-path, repeated (the command line joins the values
	// with commas): the folders as given, each taken under the driver root.
	c = Default()
	if err := c.Override(map[string]string{"library-search-path": "/home/kubernetes/bin/nvidia/lib64,/opt/nvidia/lib"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"/home/kubernetes/bin/nvidia/lib64", "/opt/nvidia/lib"}; !slices.Equal(c.CDI.LibrarySearchPaths, want) {
		t.Errorf("--library-search-path: %q, want %q", c.CDI.LibrarySearchPaths, want)
	}
	if err := Default().Override(map[string]string{"library-search-path": "lib64"}); err == nil || !strings.Contains(err.Error(), "library-search-paths") {
		t.Errorf("--library-search-path lib64: %v, want an error naming it", err)
	}
}
