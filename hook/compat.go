package hook

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/internal/ldcache"
)

// CompatDir is where CUDA images carry the CUDA forward-compatibility
// libraries (NVIDIA's cuda-compat package): a libcuda.so.<version> of a
// newer driver branch than the host's, with the libraries it comes with.
const CompatDir = "/usr/local/cuda/compat"

// Bounds on the image's compat folder, which the image controls. The
// cuda-compat package ships about 15 names and 6 libraries.
const (
	maxCompatNames = 4096 // names read from the folder
	maxCompatLibs  = 64   // libraries whose SONAME is read
	// maxCompatLibSize is the largest library read for its SONAME (a
	// real libcuda is about 100 MiB). debug/elf reads only the headers,
	// .dynamic and .dynstr through the descriptor, and checks each
	// against the file's size, so a crafted file costs little either way.
	maxCompatLibSize = 1 << 30
)

// compat is what the hook found in the image's compat folder.
type compat struct {
	// Version is the compat libcuda's driver version, e.g. "590.12.01".
	Version string
	// Entries map each compat library's SONAME to its container path, as
	// ldconfig scanning the folder would.
	Entries []ldcache.Entry
}

// parseVersion splits a driver version such as "580.65.06" into numeric
// fields; ok is false unless it has two to four fields of 1 to 9 digits
// each (driver versions have 2 or 3), so a crafted name never overflows
// or costs more than a few comparisons.
func parseVersion(v string) ([]uint64, bool) {
	fields := strings.Split(v, ".")
	if len(fields) < 2 || len(fields) > 4 {
		return nil, false
	}
	out := make([]uint64, len(fields))
	for i, f := range fields {
		if len(f) == 0 || len(f) > 9 || strings.Trim(f, "0123456789") != "" {
			return nil, false
		}
		out[i], _ = strconv.ParseUint(f, 10, 64)
	}
	return out, true
}

// compareVersions compares parsed versions field by field, numerically
// ("580.100" is newer than "580.99"); a missing field counts as 0.
func compareVersions(a, b []uint64) int {
	for i := range max(len(a), len(b)) {
		var x, y uint64
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// findCompat looks for CUDA forward-compatibility libraries in the image
// that the host driver hostVersion should give way to. NVIDIA supports
// forward compatibility across driver branches only: a compat libcuda of
// the host's own branch (580.82 on a 580.65 host) is not a supported
// pairing with the host's kernel module, and an older or equal one would
// downgrade the driver, so both are ignored, as NVIDIA's toolkit does.
// The folder is opened with RESOLVE_IN_ROOT: its links (the CUDA images'
// /usr/local/cuda -> /etc/alternatives/cuda -> /usr/local/cuda-12.x) are
// followed as the container sees them, never out of the root. Names are
// read within bounds, a libcuda that is not a regular file is ignored
// without being opened, and only regular files are read for their SONAME.
// A nil result means nothing to do; why says why, for --debug.
func findCompat(rootFD int, hostVersion string) (c *compat, why string, err error) {
	host, ok := parseVersion(hostVersion)
	if !ok {
		return nil, "", fmt.Errorf("--cuda-compat %q: want the host driver's version, such as 580.65.06", hostVersion)
	}
	dirFD, err := unix.Openat2(rootFD, strings.TrimPrefix(CompatDir, "/"), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, "the image has no " + CompatDir + " folder", nil
	}
	if err != nil {
		return nil, fmt.Sprintf("%s: %v", CompatDir, err), nil
	}
	dir := os.NewFile(uintptr(dirFD), CompatDir)
	defer dir.Close()
	names, err := dir.Readdirnames(maxCompatNames + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Sprintf("%s: %v", CompatDir, err), nil
	}
	if len(names) > maxCompatNames {
		return nil, fmt.Sprintf("%s holds more than %d names: ignored", CompatDir, maxCompatNames), nil
	}
	slices.Sort(names)

	// The newest libcuda.so.<version> that is a regular file.
	var best []uint64
	var bestName string
	for _, n := range names {
		v, ok := parseVersion(strings.TrimPrefix(n, "libcuda.so."))
		if !ok || !strings.HasPrefix(n, "libcuda.so.") || (best != nil && compareVersions(v, best) <= 0) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirFD, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		best, bestName = v, n
	}
	if best == nil {
		return nil, "no libcuda.so.<version> file in " + CompatDir, nil
	}
	version := strings.TrimPrefix(bestName, "libcuda.so.")
	if best[0] <= host[0] {
		return nil, fmt.Sprintf("%s/%s is not of a newer driver branch than the host's %s", CompatDir, bestName, hostVersion), nil
	}

	// The libraries, keyed by SONAME as ldconfig does: each regular
	// lib*.so* file's DT_SONAME, mapped to the SONAME link when the
	// folder has one (the package ships them), else to the file.
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	bySoname := map[string]string{} // SONAME -> name in the folder
	files := map[string]bool{}      // library files read
	read := 0
	for _, n := range names {
		if !strings.HasPrefix(n, "lib") || !strings.Contains(n, ".so") {
			continue
		}
		if read++; read > maxCompatLibs {
			return nil, fmt.Sprintf("%s holds more than %d libraries: not a cuda-compat folder, ignored", CompatDir, maxCompatLibs), nil
		}
		soname, err := readSONAME(dirFD, n)
		if err != nil {
			continue // links, other kinds of file, foreign ELF: ldconfig skips them too
		}
		if soname == "" {
			soname = n
		}
		target := n
		if have[soname] {
			target = soname
		}
		bySoname[soname] = target
		files[n] = true
	}
	// As ldconfig does, a development link (libcuda.so -> libcuda.so.1)
	// gets an entry of its own, which dlopen("libcuda.so") finds. Only a
	// link to a library of this folder, by a plain name, counts.
	for _, n := range names {
		var st unix.Stat_t
		if !strings.HasSuffix(n, ".so") || unix.Fstatat(dirFD, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			continue
		}
		buf := make([]byte, 256)
		k, err := unix.Readlinkat(dirFD, n, buf)
		if err != nil || k == len(buf) {
			continue
		}
		if target := string(buf[:k]); files[target] || bySoname[target] != "" {
			bySoname[n] = n
		}
	}
	// The other compat libraries go with that libcuda only: without it
	// (not an ELF library, another SONAME) none of them is used.
	if bySoname["libcuda.so.1"] == "" {
		return nil, fmt.Sprintf("%s/%s is not a libcuda.so.1 for this machine: ignored", CompatDir, bestName), nil
	}
	c = &compat{Version: version}
	for _, soname := range slices.Sorted(maps.Keys(bySoname)) {
		c.Entries = append(c.Entries, ldcache.Entry{Flags: cacheFlags(), Key: soname, Value: path.Join(CompatDir, bySoname[soname])})
	}
	return c, "", nil
}

// readSONAME returns the DT_SONAME of the regular file name in the folder
// dirFD, for this machine's architecture. It checks, on a descriptor that
// does not open the file itself (O_PATH, no link followed), that it is a
// regular file of at most maxCompatLibSize, and only then opens that
// file, through the descriptor: the open of a device acts on the host (a
// watchdog starts, a tape rewinds), and the name may be swapped for one
// in between. It reads only the headers and the dynamic section (soname).
func readSONAME(dirFD int, name string) (string, error) {
	path, err := unix.Openat(dirFD, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(path)
	var st unix.Stat_t
	if err := unix.Fstat(path, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxCompatLibSize {
		return "", fmt.Errorf("%s: %w", name, errNotRegular)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(path), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	defer unix.Close(fd)
	so, err := soname(fd, st.Size)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if strings.ContainsAny(so, "/") {
		return "", fmt.Errorf("%s: SONAME %q is not a file name", name, so)
	}
	return so, nil
}

// cudaCompat returns the cache entries of the image's compat libraries
// when they should win over the host driver's (hostVersion), nil when not.
func (s *setup) cudaCompat(hostVersion string) ([]ldcache.Entry, error) {
	c, why, err := findCompat(s.rootFD, hostVersion)
	if err != nil {
		return nil, err
	}
	if c == nil {
		s.env.debugf("CUDA forward compatibility: %s", why)
		return nil, nil
	}
	s.env.debugf("CUDA forward compatibility: %s/libcuda.so.%s over the host's %s: %d libraries first", CompatDir, c.Version, hostVersion, len(c.Entries))
	return c.Entries, nil
}
