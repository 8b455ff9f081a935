package driver

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/ldcache"
	"github.com/gpuctk/gpuctk/internal/pcibus"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

// Root is a folder that host paths are looked up under.
type Root string

// Join returns the host path of p, an absolute path under the root.
func (r Root) Join(p string) string { return filepath.Join(string(r), p) }

// Rel returns host path p relative to the root, and whether p is under it
// (the root itself included).
func (r Root) Rel(p string) (string, bool) {
	rel, err := filepath.Rel(string(r), p)
	return rel, err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// LibDirs are searched, in order, when the root's linker cache does not
// name a library: the folders distributions and driver containers use,
// on x86-64 and arm64 (Debian's packages keep the driver's libraries in
// nvidia/current).
var LibDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
	"/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/lib64",
	"/usr/lib/x86_64-linux-gnu/nvidia/current", "/usr/lib/aarch64-linux-gnu/nvidia/current",
	"/usr/lib", "/lib", "/usr/local/nvidia/lib64",
}

// BinDirs are searched, in order, for the driver's programs, after the
// bin/ of the driver prefix holding its libraries (see prefixes).
var BinDirs = []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/nvidia/bin"}

// Discover finds the files of the driver of the given version installed
// under driverRoot, with device nodes, /proc and /sys under devRoot.
func Discover(driverRoot, devRoot, version string, opts ...Option) (*Files, error) {
	dr, dv := Root(driverRoot), Root(devRoot)
	if err := isDir(driverRoot, "driver root"); err != nil {
		return nil, err
	}
	if err := isDir(devRoot, "dev root"); err != nil {
		return nil, err
	}
	nodes := &hostNodes{root: dv}
	f := &Files{Version: version, nodes: nodes}
	for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"} {
		n, err := nodes.node(p)
		if errors.Is(err, fs.ErrNotExist) && p != "/dev/nvidiactl" {
			continue // created on first use by nvidia-modprobe; absent is fine
		}
		if err != nil {
			return nil, fmt.Errorf("%w: is the NVIDIA driver loaded? (use --dev-root if /dev is elsewhere)", err)
		}
		f.ControlNodes = append(f.ControlNodes, n)
	}
	if err := f.findLibraries(dr, newSearch(opts)); err != nil {
		return nil, err
	}
	// The driver's ELF programs, never a wrapper script (one that execs
	// /usr/local/nvidia/bin/nvidia-smi fails in a container without that
	// folder), at the path every image's PATH has.
	for _, b := range binaries {
		p, err := findBinary(dr, b, binDirs(f.LibDirs), true)
		if errors.Is(err, fs.ErrNotExist) {
			continue // not every driver ships every program
		}
		if err != nil {
			return nil, err
		}
		f.Mounts = append(f.Mounts, &specs.Mount{HostPath: p, ContainerPath: path.Join(standardBin, b), Options: fileOptions})
	}
	f.findDataFiles(dr)
	for _, d := range firmwareDirs(dv) {
		fws, _ := filepath.Glob(dr.Join(path.Join(d, "nvidia", version, "gsp*.bin")))
		found := false
		for _, fw := range fws {
			name := filepath.Base(fw)
			if hp := follow(dr, path.Join(d, "nvidia", version, name)); hp != "" && isRegular(hp) {
				f.Mounts = append(f.Mounts, &specs.Mount{HostPath: hp, ContainerPath: path.Join(firmwareDir, version, name), Options: firmwareOptions})
				found = true
			}
		}
		if found {
			break
		}
	}
	for _, s := range sockets {
		if st, err := os.Lstat(dr.Join(s)); err == nil && st.Mode().Type() == fs.ModeSocket {
			f.Mounts = append(f.Mounts, &specs.Mount{HostPath: dr.Join(s), ContainerPath: s, Options: socketOptions})
		}
	}
	return f, nil
}

// findLibraries looks up each driver library first in the root's linker
// cache, then in the library search paths and the usual library folders,
// and takes the file whose name carries the driver version.
func (f *Files) findLibraries(r Root, s search) error {
	dirs, err := cacheDirs(r, func(base string) bool {
		return slices.ContainsFunc(libraries, func(l library) bool { return l.base == base })
	})
	if err != nil {
		return err
	}
	for _, l := range libraries {
		found, err := l.find(r, s.libDirs(dirs[l.base]), f.Version)
		if err != nil {
			return err
		}
		if found == "" {
			if l.required {
				return fmt.Errorf("driver library %s not found under driver root %s (looked in %s): is driver %s installed there? (give a folder no linker cache lists with --library-search-path)", l.base+".so."+f.Version, r, s.where(), f.Version)
			}
			continue
		}
		soname, err := readSONAME(r.Join(found))
		if err != nil {
			return err
		}
		f.addLibrary(l, r.Join(found), found, soname)
	}
	f.addGraphicsLinks()
	return nil
}

// find returns the container path of a library's file, "" when there is
// none: the file whose name carries the driver version (or the library's
// own suffix), in the first folder that has it. A library that has a
// sub-folder of its own (vdpau/) is looked for there first, then in the
// folder itself, where a driver prefix keeps it (/usr/local/nvidia/lib64).
func (l library) find(r Root, dirs []string, version string) (string, error) {
	suffix := version
	if l.suffix != "" {
		suffix = l.suffix
	}
	if l.dir != "" {
		var both []string
		for _, d := range dirs {
			if path.Base(d) != l.dir {
				both = append(both, path.Join(d, l.dir))
			}
			both = append(both, d)
		}
		dirs = both
	}
	for _, d := range dirs {
		pattern := path.Join(d, l.base+".so."+suffix)
		if l.suffix == "" {
			if isRegular(r.Join(pattern)) {
				return pattern, nil
			}
			continue
		}
		matches, err := filepath.Glob(r.Join(pattern))
		if err != nil {
			return "", fmt.Errorf("driver library %s: %w", pattern, err)
		}
		for _, m := range matches {
			if isRegular(m) {
				return path.Join(d, filepath.Base(m)), nil
			}
		}
	}
	return "", nil
}

// addGraphicsLinks adds the graphics links whose target library was found.
func (f *Files) addGraphicsLinks() {
	for _, gl := range graphicsLinks {
		target, name, _ := strings.Cut(gl, "::")
		for _, lib := range f.Libraries {
			dir := path.Dir(lib)
			if path.Clean(path.Join(dir, path.Dir(name), target)) == lib {
				f.Links = append(f.Links, target+"::"+path.Join(dir, name))
				break
			}
		}
	}
}

// cacheDirs returns, for each library base name, the folders the root's
// /etc/ld.so.cache lists it in, and the folder of the file each entry
// links to when that is another (Debian's driver packages put the
// libraries in .../nvidia/current and their SONAMEs, which the cache
// lists, link there through /etc/alternatives); links are followed for
// the base names wanted alone, as each costs a few system calls and a
// cache lists hundreds of libraries. A missing cache is no error; one
// that cannot be read or parsed is.
func cacheDirs(r Root, want func(base string) bool) (map[string][]string, error) {
	p := r.Join("/etc/ld.so.cache")
	data, err := readfile.Regular(p, maxLinkerCache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("linker cache: %w", err)
	}
	c, err := ldcache.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("linker cache %s: %w (run ldconfig under the driver root to rebuild it)", p, err)
	}
	out := map[string][]string{}
	for _, e := range c.Entries {
		base, _, ok := strings.Cut(e.Key, ".so")
		if !ok || !path.IsAbs(e.Value) || !want(base) {
			continue
		}
		for _, p := range []string{e.Value, resolve(r, e.Value)} {
			if d := path.Dir(p); p != "" && !slices.Contains(out[base], d) {
				out[base] = append(out[base], d)
			}
		}
	}
	return out, nil
}

// Bounds on the files read under a driver or dev root, all through
// readfile.Regular: a FIFO or an endless device there is an error at
// once, never a hang. A linker cache of a full distribution is 100 to
// 300 KiB; mig-minors lists a few thousand short lines; a capability
// file has three.
const (
	maxLinkerCache = 64 << 20
	maxMIGMinors   = 1 << 20
	maxCapability  = 64 << 10
)

// maxLinks bounds the links resolve follows, as the kernel's 40.
const maxLinks = 40

// resolve follows the links at p, an absolute path under the root, and
// returns the path under the root they lead to: an absolute target is
// taken under the root too, as a container or a chroot would see it, and
// a relative one cannot climb above it. It returns "" when the chain is
// broken, unreadable or a loop.
func resolve(r Root, p string) string {
	for range maxLinks {
		target, err := os.Readlink(r.Join(p))
		if errors.Is(err, unix.EINVAL) {
			return p // not a link: the end of the chain
		}
		if err != nil {
			return ""
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		p = path.Clean(target)
	}
	return ""
}

// readSONAME returns the DT_SONAME of a shared object.
func readSONAME(p string) (string, error) {
	f, err := readfile.Open(p)
	if err != nil {
		return "", fmt.Errorf("driver library %s: %w", p, err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return "", fmt.Errorf("driver library %s: %w", p, err)
	}
	names, err := ef.DynString(elf.DT_SONAME)
	if err != nil {
		return "", fmt.Errorf("driver library %s: %w", p, err)
	}
	if len(names) == 0 {
		return "", nil
	}
	return names[0], nil
}

// hostNodes finds device nodes by stat under a dev root.
type hostNodes struct {
	root Root

	once      sync.Once
	migMinors map[string]int
	migErr    error
}

func (h *hostNodes) node(p string) (*specs.DeviceNode, error) {
	var st unix.Stat_t
	hp := h.root.Join(p)
	if err := unix.Stat(hp, &st); err != nil {
		return nil, fmt.Errorf("device node %s: %w", hp, err)
	}
	n := &specs.DeviceNode{Path: p, Major: int64(unix.Major(st.Rdev)), Minor: int64(unix.Minor(st.Rdev))}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		n.Type = "c"
	case unix.S_IFBLK:
		n.Type = "b"
	default:
		return nil, fmt.Errorf("device node %s is not a device (recreate it with mknod or nvidia-modprobe)", hp)
	}
	if h.root != "/" {
		n.HostPath = hp
	}
	return n, nil
}

// drm lists the DRM nodes the kernel made for the GPU at busID (NVML's
// form), from /sys/bus/pci/devices/<the kernel's bus id>/drm under the dev
// root; none for a GPU whose bus id is unknown or no PCI bus id.
func (h *hostNodes) drm(_ int, busID string) ([]string, error) {
	bus, ok := pcibus.Sysfs(busID)
	if !ok {
		return nil, nil
	}
	dir := h.root.Join("/sys/bus/pci/devices/" + bus + "/drm")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("DRM devices of GPU %s: %w", busID, err)
	}
	var names []string
	for _, e := range entries {
		var n int64
		if scan(e.Name(), "card%d", &n) || scan(e.Name(), "renderD%d", &n) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// capMinor reads MIG capability minors from /proc/driver/nvidia-caps/mig-minors,
// falling back to the per-instance capability files the driver exposes.
func (h *hostNodes) capMinor(gpuMinor, gi, ci int) (int, error) {
	key := fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi)
	if ci >= 0 {
		key = fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci)
	}
	h.once.Do(func() {
		p := h.root.Join("/proc/driver/nvidia-caps/mig-minors")
		data, err := readfile.Regular(p, maxMIGMinors)
		if err != nil {
			h.migErr = err
			return
		}
		h.migMinors, h.migErr = ParseMIGMinors(data)
		if h.migErr != nil {
			h.migErr = fmt.Errorf("%s: %w", p, h.migErr)
		}
	})
	if h.migErr == nil {
		if m, ok := h.migMinors[key]; ok {
			return m, nil
		}
	} else if !errors.Is(h.migErr, fs.ErrNotExist) {
		return 0, h.migErr
	}
	rel := fmt.Sprintf("gpu%d/mig/gi%d/access", gpuMinor, gi)
	if ci >= 0 {
		rel = fmt.Sprintf("gpu%d/mig/gi%d/ci%d/access", gpuMinor, gi, ci)
	}
	capFile := h.root.Join("/proc/driver/nvidia/capabilities/" + rel)
	data, err := readfile.Regular(capFile, maxCapability)
	if err != nil {
		return 0, fmt.Errorf("MIG capability %s: not in mig-minors and %w", key, err)
	}
	m, err := ParseCapability(data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", capFile, err)
	}
	return m, nil
}

// ParseMIGMinors parses /proc/driver/nvidia-caps/mig-minors: lines of
// "NAME MINOR", e.g. "gpu0/gi1/ci0/access 13".
func ParseMIGMinors(data []byte) (map[string]int, error) {
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"NAME MINOR\", got %q", line, sc.Text())
		}
		m, err := strconv.Atoi(fields[1])
		if err != nil || m < 0 || m > 1<<20 {
			return nil, fmt.Errorf("line %d: minor %q is not a device minor", line, fields[1])
		}
		out[fields[0]] = m
	}
	return out, sc.Err()
}

// ParseCapability reads the minor from a capability file such as
// /proc/driver/nvidia/capabilities/gpu0/mig/gi1/access.
func ParseCapability(data []byte) (int, error) {
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "DeviceFileMinor" {
			m, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || m < 0 || m > 1<<20 {
				return 0, fmt.Errorf("DeviceFileMinor %q is not a device minor", strings.TrimSpace(v))
			}
			return m, nil
		}
	}
	return 0, errors.New("no DeviceFileMinor line")
}

func isDir(p, what string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, p, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s is not a folder", what, p)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// follow returns the host path of the file at p (absolute, under the
// root), its links followed under the root as resolve follows them; ""
// when they lead nowhere.
func follow(r Root, p string) string {
	hp := r.Join(p)
	if !isLink(hp) {
		return hp
	}
	if p = resolve(r, p); p == "" {
		return ""
	}
	return r.Join(p)
}

// isLink reports whether p is a symbolic link.
func isLink(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode()&fs.ModeSymlink != 0
}

func isRegular(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode().IsRegular()
}

// firmwareClassPath is the folder the kernel looks for firmware in before
// its built-in ones, when the host sets it (a driver prefix's firmware/).
const firmwareClassPath = "/sys/module/firmware_class/parameters/path"

// firmwareDirs are the folders the kernel loads firmware from, in its
// order (fw_path in drivers/base/firmware_loader/main.c), each to be taken
// under the driver root: the firmware class path, read under the dev root
// as /sys is, then /lib/firmware/updates/<release>, /lib/firmware/updates,
// /lib/firmware/<release> and /lib/firmware, <release> being the running
// kernel's (uname -r). /usr/lib/firmware last, for a root whose /lib is
// no link to it.
func firmwareDirs(dev Root) []string {
	var dirs []string
	if data, err := readfile.Regular(dev.Join(firmwareClassPath), 4096); err == nil {
		if p := strings.TrimSpace(string(data)); path.IsAbs(p) {
			dirs = append(dirs, path.Clean(p))
		}
	}
	release := kernelRelease(dev)
	for _, d := range []string{"/lib/firmware/updates/" + release, "/lib/firmware/updates", "/lib/firmware/" + release, "/lib/firmware", "/usr/lib/firmware"} {
		if !strings.HasSuffix(d, "/") && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// kernelRelease is the running kernel's release, as /proc under the dev
// root gives it (uname's when it does not); "" when unknown.
func kernelRelease(dev Root) string {
	if data, err := readfile.Regular(dev.Join("/proc/sys/kernel/osrelease"), 256); err == nil {
		if r := strings.TrimSpace(string(data)); r != "" && !strings.ContainsAny(r, "/\n") {
			return r
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
