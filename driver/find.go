package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
	base, _, _ := strings.Cut(soname, ".so")
	dirs, err := cacheDirs(r, func(b string) bool { return b == base })
	if err != nil {
		return "", err
	}
	for _, d := range append(dirs[base], LibDirs...) {
		if p := r.Join(path.Join(d, soname)); exists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found under driver root %s: is the NVIDIA driver installed? (use --driver-root for a driver installed elsewhere, or --simulate on a machine without a GPU)", soname, driverRoot)
}

// FindBinary returns the host path of an executable driver program under a
// driver root, the first found in BinDirs. A program that is a link
// (Debian's alternatives, absolute) is followed under the root, as the
// host sees it, and the file it leads to returned. When there is none, the
// error wraps fs.ErrNotExist.
func FindBinary(driverRoot, name string) (string, error) {
	p, _, err := findBinary(driverRoot, name)
	return p, err
}

// findBinary is FindBinary, also returning the program's usual path in
// the root (a folder of BinDirs), where a container gets it.
func findBinary(driverRoot, name string) (host, at string, err error) {
	r := Root(driverRoot)
	for _, d := range BinDirs {
		at := path.Join(d, name)
		p := follow(r, at)
		if p == "" {
			continue
		}
		st, err := os.Stat(p)
		if err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, at, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("driver root %s: %w", driverRoot, err)
		}
	}
	return "", "", notFound(fmt.Sprintf("driver root %s: %s is not in %s", driverRoot, name, strings.Join(BinDirs, ", ")))
}

// notFound is an error that reads as its message and is fs.ErrNotExist.
type notFound string

func (e notFound) Error() string { return string(e) }
func (e notFound) Unwrap() error { return fs.ErrNotExist }
