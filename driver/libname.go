package driver

import (
	"os"
	"path"
	"strings"
)

// IsLibrary reports whether name is the file name of one of the driver's
// libraries or of a link to one: a library's base name followed by ".so"
// and nothing or a version (libcuda.so, libcuda.so.1,
// libcuda.so.580.65.06). It is never true of the system's own libraries
// (glibc's, for one), which a driver root holds beside the driver's.
func IsLibrary(name string) bool {
	base, rest, ok := strings.Cut(name, ".so")
	if !ok || (rest != "" && rest[0] != '.') {
		return false
	}
	for _, l := range libraries {
		if l.base == base {
			return true
		}
	}
	return false
}

// Libraries returns the driver's libraries under a driver root: each name
// in the library search paths and LibDirs that IsLibrary accepts (the
// first folder's where two hold it), with the host path of the file it
// leads to, its links followed inside the root as a chroot would (Debian's
// links through /etc/alternatives are absolute). A name whose links are
// broken is left out.
func Libraries(driverRoot string, opts ...Option) map[string]string {
	r := Root(driverRoot)
	out := map[string]string{}
	for _, d := range newSearch(opts).libDirs(nil) {
		entries, err := os.ReadDir(r.Join(d))
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if _, ok := out[name]; ok || !IsLibrary(name) {
				continue
			}
			if p := follow(r, path.Join(d, name)); p != "" && isRegular(p) {
				out[name] = p
			}
		}
	}
	return out
}
