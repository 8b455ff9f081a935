package driver

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuctk/gpuctk/internal/readfile"
)

// Option tunes where discovery looks for the driver's files.
type Option func(*search)

// search is where, beyond the root's linker cache and the usual folders,
// the driver's files are looked for.
type search struct {
	libraryPaths []string
}

// WithLibrarySearchPaths has discovery look for the driver's libraries in
// dirs (absolute, taken under the driver root) after the root's linker
// cache and before LibDirs: a driver whose libraries no ld.so.cache lists
// (GKE's /home/kubernetes/bin/nvidia/lib64) is found there, NVML's
// libnvidia-ml.so.1 included.
func WithLibrarySearchPaths(dirs ...string) Option {
	return func(s *search) {
		for _, d := range dirs {
			if d = path.Clean(d); path.IsAbs(d) && !slices.Contains(s.libraryPaths, d) {
				s.libraryPaths = append(s.libraryPaths, d)
			}
		}
	}
}

func newSearch(opts []Option) search {
	var s search
	for _, o := range opts {
		o(&s)
	}
	return s
}

// libDirs are the folders a library is looked for in, in order: those
// the root's linker cache lists it in, the library search paths, LibDirs.
func (s search) libDirs(cached []string) []string {
	return slices.Concat(cached, s.libraryPaths, LibDirs)
}

// where says where libraries were looked for, for an error.
func (s search) where() string {
	return "its /etc/ld.so.cache, " + strings.Join(slices.Concat(s.libraryPaths, LibDirs), ", ")
}

// FindLibrary returns the host path of a library under a driver root, by
// its SONAME (e.g. libnvidia-ml.so.1): first as the root's linker cache
// lists it, then in the library search paths and the usual folders.
func FindLibrary(driverRoot, soname string, opts ...Option) (string, error) {
	r := Root(driverRoot)
	if err := isDir(driverRoot, "driver root"); err != nil {
		return "", err
	}
	s := newSearch(opts)
	base, _, _ := strings.Cut(soname, ".so")
	dirs, err := cacheDirs(r, func(b string) bool { return b == base })
	if err != nil {
		return "", err
	}
	for _, d := range s.libDirs(dirs[base]) {
		if p := r.Join(path.Join(d, soname)); exists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found under driver root %s (looked in %s): is the NVIDIA driver installed? (use --driver-root for a driver installed elsewhere, --library-search-path for libraries no linker cache lists, or --simulate on a machine without a GPU)", soname, driverRoot, s.where())
}

// prefixes returns the driver prefixes among library folders: the folder
// holding a lib64/ or lib/ of the driver's libraries, as /usr/local/nvidia
// for /usr/local/nvidia/lib64 (GKE's /home/kubernetes/bin/nvidia), whose
// bin/ holds the driver's programs and share/ its vendor files. / and /usr
// are no prefix: their bin/ and share/ are the usual folders.
func prefixes(libDirs []string) []string {
	var out []string
	for _, d := range libDirs {
		if b := path.Base(d); b != "lib64" && b != "lib" {
			continue
		}
		if p := path.Dir(d); p != "/" && p != "/usr" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// binDirs are the folders the driver's programs are looked for in: the
// bin/ of each driver prefix, then BinDirs.
func binDirs(libDirs []string) []string {
	var out []string
	for _, p := range prefixes(libDirs) {
		out = append(out, path.Join(p, "bin"))
	}
	for _, d := range BinDirs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// FindBinary returns the host path of a driver program under a driver
// root, to run it on the host: the driver's ELF program, from the bin/ of
// the driver prefix that holds libnvidia-ml (found as FindLibrary finds
// it), then from BinDirs. A program that is a link (Debian's
// alternatives, absolute) is followed under the root, as the host sees
// it, and the file it leads to returned. Where no folder has an ELF
// program of that name, the first executable found (a script) is
// returned. Never the caller's PATH: the device plugin runs in an image
// whose PATH is its own. When there is none, the error wraps
// fs.ErrNotExist.
func FindBinary(driverRoot, name string, opts ...Option) (string, error) {
	return findBinary(Root(driverRoot), name, ProgramDirs(driverRoot, opts...), false)
}

// ProgramDirs are the folders under a driver root (absolute, as the root
// has them) that hold the driver's programs, in the order FindBinary
// looks: the bin/ of the driver prefix holding libnvidia-ml, then
// BinDirs. A program run from one finds its fellows (the MPS control
// daemon its server) with them on its PATH.
func ProgramDirs(driverRoot string, opts ...Option) []string {
	var libDirs []string
	if lib, err := FindLibrary(driverRoot, "libnvidia-ml.so.1", opts...); err == nil {
		if rel, ok := Root(driverRoot).Rel(lib); ok {
			libDirs = []string{path.Dir("/" + rel)}
		}
	}
	return binDirs(libDirs)
}

// findBinary returns the host path of the first ELF program called name
// in dirs under the root; with elfOnly unset, the first executable file
// when none is an ELF program.
func findBinary(r Root, name string, dirs []string, elfOnly bool) (string, error) {
	var first string
	for _, d := range dirs {
		p := follow(r, path.Join(d, name))
		if p == "" {
			continue
		}
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("driver root %s: %w", r, err)
		}
		if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 || !inRoot(r, p) {
			continue
		}
		if isELF(p) {
			return p, nil
		}
		if first == "" {
			first = p
		}
	}
	if first != "" && !elfOnly {
		return first, nil
	}
	return "", notFound(fmt.Sprintf("driver root %s: %s is not in %s", r, name, strings.Join(dirs, ", ")))
}

// elfMagic starts every ELF file.
var elfMagic = []byte("\x7fELF")

// inRoot reports whether p, a host path under the root whose last
// component is no link, is still under the root with the links of the
// folders on its way followed: one that leads out of the root is a file
// the host does not have there (the container, given the driver's files
// only, would lack what it needs beside it).
func inRoot(r Root, p string) bool {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	root, err := filepath.EvalSymlinks(string(r))
	if err != nil {
		return false
	}
	_, under := Root(root).Rel(real)
	return under
}

// isELF reports whether p is an ELF file, read through the bounded reader
// (a FIFO in its place costs no wait).
func isELF(p string) bool {
	head, err := readfile.Head(p, int64(len(elfMagic)))
	return err == nil && bytes.Equal(head, elfMagic)
}

// notFound is an error that reads as its message and is fs.ErrNotExist.
type notFound string

func (e notFound) Error() string { return string(e) }
func (e notFound) Unwrap() error { return fs.ErrNotExist }
