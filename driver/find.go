package driver

import (
	"fmt"
	"path"
	"strings"
)

// FindLibrary returns the host path of a library under a driver root, by
// its SONAME (e.g. libnvidia-ml.so.1): first as the root's linker cache
// lists it, then in the usual library folders.
func FindLibrary(driverRoot, soname string) (string, error) {
	r := Root(driverRoot)
	if err := isDir(driverRoot, "driver root"); err != nil {
		return "", err
	}
	dirs, err := cacheDirs(r)
	if err != nil {
		return "", err
	}
	base, _, _ := strings.Cut(soname, ".so")
	for _, d := range append(dirs[base], libDirs...) {
		if p := r.Join(path.Join(d, soname)); exists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found under driver root %s: is the NVIDIA driver installed? (use --driver-root for a driver installed elsewhere, or --simulate on a machine without a GPU)", soname, driverRoot)
}
