package hook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/ldcache"
)

// DefaultLdconfig is the host's ldconfig, run chrooted into the container
// root (-r) when the linker cache must be rebuilt.
const DefaultLdconfig = "/sbin/ldconfig"

// SetupOptions are the setup subcommand's arguments.
type SetupOptions struct {
	// DriverFiles are /TARGET::/PATH pairs: the driver's file PATH is
	// TARGET in a folder the spec mounts (see driver.Gather), and PATH
	// becomes a link to TARGET, as a mount of the file would have put it
	// there. Made before Links, which may lead to them.
	DriverFiles []string
	// Links are TARGET::/ABSOLUTE/LINK pairs: LINK is made inside the
	// container root, pointing at TARGET.
	Links []string
	// Libraries are the absolute paths, inside the container, of the
	// libraries to add to the image's linker cache.
	Libraries []string
	// Folders are the library folders ldconfig scans when the cache must
	// be rebuilt; without any, the cache is left alone.
	Folders []string
	// Ldconfig is the host's ldconfig; empty means DefaultLdconfig.
	Ldconfig string
	// Limits bound the ldconfig child; zero fields take the defaults.
	Limits Limits
	// CUDACompat is the host driver's version when the host's GPUs
	// support CUDA forward compatibility: the image's CompatDir libraries
	// then come first in the linker cache when they are of a newer
	// driver branch. Empty: never.
	CUDACompat string
	// Params is the host path of the driver's params file: the container
	// gets a copy saying ModifyDeviceFiles: 0 over its own. Empty: left.
	Params string
	// EGLLibrary is the driver's EGL vendor library in the container: when
	// it is there (capability-graphics), the container gets an application
	// profile limiting EGL to its GPUs (see appProfile). Empty: none.
	EGLLibrary string
}

// Setup makes the driver libraries' links and updates the linker cache of
// the container that e's OCI state names.
func Setup(e *Env, o SetupOptions) error {
	for _, l := range o.DriverFiles {
		if target, file, ok := strings.Cut(l, "::"); !ok || !path.IsAbs(target) || path.Dir(path.Clean(target)) == "/" || !path.IsAbs(file) || path.Clean(file) == "/" {
			return fmt.Errorf("--driver-file %q: want /FOLDER/NAME::/PATH", l)
		}
	}
	for _, l := range o.Links {
		if target, link, ok := strings.Cut(l, "::"); !ok || target == "" || !path.IsAbs(link) {
			return fmt.Errorf("--link %q: want TARGET::/ABSOLUTE/LINK", l)
		}
	}
	for _, l := range o.Libraries {
		if !path.IsAbs(l) {
			return fmt.Errorf("--library %q: want an absolute path", l)
		}
	}
	c, err := e.Container()
	if err != nil {
		return err
	}
	// Containers can share a root (podman --rootfs): their hooks would race
	// on the same links and on ldconfig's fixed temp file. One at a time.
	rootFD, err := lockRoot(c.Root, o.Limits.withDefaults().Lock)
	if err != nil {
		return err
	}
	defer unix.Close(rootFD)
	root, err := os.OpenRoot(c.Root)
	if err != nil {
		return fmt.Errorf("container root: %w", err)
	}
	defer root.Close()
	s := &setup{env: e, root: root, rootFD: rootFD, c: c, slowFolders: e.osRoot}
	defer s.close()
	e.debugf("setup of container root %s: %d driver files, %d links, %d libraries, %d folders", c.Root, len(o.DriverFiles), len(o.Links), len(o.Libraries), len(o.Folders))
	for _, l := range o.DriverFiles {
		target, file, _ := strings.Cut(l, "::")
		if err := s.driverFile(path.Clean(target), file); err != nil {
			return err
		}
	}
	for _, l := range o.Links {
		target, link, _ := strings.Cut(l, "::")
		to := path.Join(path.Dir(link), target)
		if s.skipped[to] {
			s.skip(link)
			e.debugf("link %s skipped: %s is not in the container", link, to)
			continue
		}
		if ok, err := s.present(to, false); !ok || err != nil {
			if err != nil {
				return fmt.Errorf("link %s: %w", link, err)
			}
			e.debugf("link %s skipped: %s is not in the container", link, target)
			continue
		}
		if err := s.mkdirs(path.Dir(link)); err != nil {
			return fmt.Errorf("link %s: %w", link, err)
		}
		if s.symlinks[to] && !strings.Contains(target, "/") {
			linked, err := s.hardlink(target, link)
			if err != nil {
				return err
			}
			if linked {
				s.markMade(link)
				s.symlinks[path.Clean(link)] = true
				e.debugf("link %s: another name of %s", link, to)
				continue
			}
		}
		if err := s.symlink(target, link, nil); err != nil {
			return err
		}
		s.markMade(link)
		e.debugf("link %s -> %s", link, target)
	}
	if o.Params != "" {
		if err := s.protectDeviceNodes(o.Params); err != nil {
			return err
		}
	}
	if o.EGLLibrary != "" && !s.skipped[path.Clean(o.EGLLibrary)] {
		if err := s.appProfile(o.EGLLibrary); err != nil {
			return err
		}
	}
	o.Libraries, err = s.onlyPresent(o.Libraries, false)
	if err != nil {
		return err
	}
	if o.Folders, err = s.onlyPresent(o.Folders, true); err != nil || len(o.Folders) == 0 {
		return err
	}
	var first []ldcache.Entry
	if o.CUDACompat != "" {
		if first, err = s.cudaCompat(o.CUDACompat); err != nil {
			return err
		}
		if first != nil {
			o.Folders = append([]string{CompatDir}, o.Folders...)
		}
	}
	// why says why the image's cache could not be merged into.
	var why *noCache
	if len(o.Libraries) > 0 {
		err := s.mergeCache(first, o.Libraries)
		if err == nil {
			e.debugf("merged %d libraries into the image's linker cache", len(o.Libraries))
			return nil
		}
		if !errors.As(err, &why) {
			return err
		}
	}
	if o.Ldconfig == "" {
		o.Ldconfig = DefaultLdconfig
	}
	e.debugf("running %s for %v", o.Ldconfig, o.Folders)
	if err := s.updateCache(o.Ldconfig, o.Folders, o.Limits.withDefaults()); err != nil {
		if why != nil && !why.missing {
			return fmt.Errorf("%w; rebuilding it: %w", why, err)
		}
		return err
	}
	if why != nil && !why.missing {
		s.warn("%v; rebuilt it with ldconfig", why)
	}
	return nil
}

// driverFile makes file a link to target, the driver's file in a folder
// mount, when the container has that folder: the spec lists the files of
// every capability, and each container gets the folders of the
// capabilities it has. A mount of the file would cover whatever the image
// has at its path: a link there is replaced, a file covered (coverFile), a
// folder fails the hook, as it fails such a mount. The link is absolute:
// resolved in the container's root, whatever links the image has in the
// way.
func (s *setup) driverFile(target, file string) error {
	mount := path.Dir(target)
	// The folder is looked up once, not each file in it: the spec mounts
	// it whole, read-only, with every file it lists.
	mounted, known := s.mounts[mount]
	if !known {
		var err error
		if mounted, err = s.present(mount, true); err != nil {
			return fmt.Errorf("driver file %s: %s: %w", file, mount, err)
		}
		if s.mounts == nil {
			s.mounts = map[string]bool{}
		}
		s.mounts[mount] = mounted
	}
	if !mounted {
		s.skip(file)
		s.env.debugf("driver file %s skipped: %s is not in the container", file, mount)
		return nil
	}
	if err := s.mkdirs(path.Dir(file)); err != nil {
		return fmt.Errorf("driver file %s: %w", file, err)
	}
	covered := false
	err := s.symlink(target, file, func(d folder, base string, st fs.FileInfo) error {
		if st.IsDir() {
			return fmt.Errorf("driver file %s: the image has a folder there, where the driver's file goes", file)
		}
		// The image's own file: covered, as the file's mount would
		// cover it, never removed (podman --rootfs runs on the user's
		// own folder).
		covered = true
		return s.coverFile(d, base, target, file)
	})
	if err != nil || covered {
		return err
	}
	s.markMade(file)
	s.env.debugf("driver file %s -> %s", file, target)
	return nil
}

// coverFile bind-mounts target, the driver's file in its folder mount,
// read-only over base in d, a file the image has where the driver's goes,
// as runc mounts a spec's file. Only in the container's own mount
// namespace, outside a user namespace (see protectDeviceNodes): elsewhere
// the image's file is left, with a warning. The mount goes from and onto
// descriptors opened in the root without following links.
func (s *setup) coverFile(d folder, base, target, file string) error {
	if !inInitialUserNS() {
		s.warn("%s is the image's own file: left as it is (a container with a user namespace: no mount over it)", file)
		return nil
	}
	if proc, err := procMounted(s.rootFD); err != nil || !proc {
		s.warn("%s is the image's own file: left as it is (not in the container's mount namespace: no mount over it)", file)
		return nil
	}
	dir, name := path.Split(strings.TrimPrefix(target, "/"))
	fd, err := s.folder(dir)
	if err != nil {
		return fmt.Errorf("driver file %s: %w", file, err)
	}
	src, err := fd.OpenFile(name, unix.O_PATH, 0)
	if err != nil {
		return fmt.Errorf("driver file %s: %w", file, err)
	}
	defer src.Close()
	dst, err := d.OpenFile(base, unix.O_PATH, 0)
	if err != nil {
		return fmt.Errorf("driver file %s: %w", file, err)
	}
	defer dst.Close()
	for _, f := range []*os.File{src, dst} {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return fmt.Errorf("driver file %s: %w", file, err)
		}
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFDIR || t == unix.S_IFLNK {
			return fmt.Errorf("driver file %s: %s changed under the hook", file, f.Name())
		}
	}
	tree, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("driver file %s: open_tree %s: %w", file, target, err)
	}
	defer unix.Close(tree)
	// As the folder's mount, which noexec firmware keeps from the clone.
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("driver file %s: mount_setattr: %w", file, err)
	}
	if err := unix.MoveMount(tree, "", int(dst.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("driver file %s: mount %s over the image's file: %w", file, target, err)
	}
	s.markMade(file)
	s.env.debugf("driver file %s: the image's file covered by %s", file, target)
	return nil
}

// skip records p, a driver file or a link to one, as left out (see
// setup.skipped).
func (s *setup) skip(p string) {
	if s.skipped == nil {
		s.skipped = map[string]bool{}
	}
	s.skipped[path.Clean(p)] = true
}

// markMade records that the link (or mount) at p, absolute in the
// container, was made: present then counts it without a lookup.
func (s *setup) markMade(p string) {
	if s.made == nil {
		s.made = map[string]bool{}
	}
	s.made[path.Clean(p)] = true
}

// present reports whether p (absolute, in the container) is in the root: a
// folder when dir is set, else a file or a device node. The spec lists
// the links and libraries of every capability and every GPU's DRM by-path
// links; those whose target the container was not given are skipped, so
// each container gets the links of the devices it has. A FIFO, a socket
// or anything else counts as absent. Links are followed inside the root
// only: one that leads out of it is an error, as for the links made.
func (s *setup) present(p string, dir bool) (bool, error) {
	if !dir && s.made[path.Clean(p)] {
		return true, nil
	}
	// Fast: one lstat in the path's folder, opened once for all the paths
	// it holds (the spec lists a hundred, in a handful of folders); a
	// link, or an error other than absence, is resolved whole below.
	rel := strings.TrimPrefix(path.Clean(p), "/")
	folder, base := path.Split(rel)
	if d, err := s.folder(folder); err == nil {
		if fd, ok := d.(dirFD); ok && base != "" {
			// Without the allocations of an fs.FileInfo: most of the
			// spec's paths are absent or plain files.
			mode, err := fd.mode(base)
			if err == unix.ENOENT {
				return false, nil
			}
			if err == nil && mode != unix.S_IFLNK {
				return modePresent(mode, dir), nil
			}
		}
		st, err := d.Lstat(base)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err == nil && st.Mode()&fs.ModeSymlink == 0 {
			return kindPresent(st, dir), nil
		}
	} else if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	st, err := s.root.Stat(rel)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return kindPresent(st, dir), nil
}

// kindPresent reports whether st is what present looks for: a folder when
// dir is set, else a file or a device node.
func kindPresent(st fs.FileInfo, dir bool) bool {
	if dir {
		return st.IsDir()
	}
	return st.Mode().IsRegular() || st.Mode()&fs.ModeCharDevice != 0
}

// modePresent is kindPresent of a file type (S_IFMT bits).
func modePresent(mode uint32, dir bool) bool {
	if dir {
		return mode == unix.S_IFDIR
	}
	return mode == unix.S_IFREG || mode == unix.S_IFCHR
}

// mkdirs makes the folders of dir that the container lacks (the by-path
// folder under /dev/dri, gbm/ in the library folder), inside the root and
// the container's own. Each is made in its parent (the deepest folder of
// dir that is there, opened inside the root by folder), then opened there
// without following a link: a call or two a folder, where os.Root walks
// the path from the root again for each look, make and chown (the way
// left where openat2 is missing). Anything in the way but a missing
// folder is left for the link itself to fail on.
func (s *setup) mkdirs(dir string) error {
	rel := strings.TrimPrefix(path.Clean(dir), "/")
	if _, err := s.folder(rel); err == nil {
		return nil // there already, as for most links
	}
	if s.slowFolders {
		return s.mkdirsRoot(rel)
	}
	parts := strings.Split(rel, "/")
	n := len(parts)
	parent := dirFD(s.rootFD)
	for ; n > 0; n-- {
		d, err := s.folder(path.Join(parts[:n]...))
		if err == nil {
			fd, ok := d.(dirFD)
			if !ok { // openat2 refused since: os.Root's way
				return s.mkdirsRoot(rel)
			}
			parent = fd
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	for i := n; i < len(parts); i++ {
		made := path.Join(parts[:i+1]...)
		err := unix.Mkdirat(int(parent), parts[i], 0o755)
		switch {
		case err == nil:
			s.missing = nil // folders found missing may be there now
			if err := s.chown(made); err != nil {
				return err
			}
		case !errors.Is(err, unix.EEXIST):
			return &fs.PathError{Op: "mkdir", Path: "/" + made, Err: err}
		}
		fd, err := unix.Openat(int(parent), parts[i], unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: "/" + made, Err: err}
		}
		parent = dirFD(fd)
		if s.folders == nil {
			s.folders = map[string]folder{}
		}
		s.folders[made] = parent
	}
	return nil
}

// mkdirsRoot is mkdirs through os.Root.
func (s *setup) mkdirsRoot(rel string) error {
	dir := ""
	for _, part := range strings.Split(rel, "/") {
		dir = path.Join(dir, part)
		if _, err := s.root.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
			continue // there; anything else fails the link itself
		}
		if err := s.root.Mkdir(dir, 0o755); err != nil {
			return err
		}
		s.missing = nil // folders found missing may be there now
		if err := s.chown(dir); err != nil {
			return err
		}
	}
	return nil
}

// onlyPresent returns the paths of list that are in the root.
func (s *setup) onlyPresent(list []string, dir bool) ([]string, error) {
	out := list[:0:0]
	for _, p := range list {
		if s.skipped[path.Clean(p)] {
			continue
		}
		ok, err := s.present(p, dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// setup is one run of Setup.
type setup struct {
	env  *Env
	root *os.Root
	// rootFD is the root's folder, locked (lockRoot); folders, the
	// compat folder and /proc are opened from it.
	rootFD int
	c      Container
	// folders are the root's folders opened so far, by path (see folder).
	folders map[string]folder
	// missing are the folders that could not be opened, with why.
	missing map[string]error
	// slowFolders: openat2 is not available, folders are opened through
	// os.Root.
	slowFolders bool
	// made are the links made (or found right) so far, by absolute path:
	// their targets are in the root, so they are too.
	made map[string]bool
	// symlinks are the links of made that are symlinks in the root
	// (made, or found right), by absolute path: a link to one in its
	// folder can be another name of it (see hardlink).
	symlinks map[string]bool
	// mounts says, of each driver folder asked about, whether the
	// container has it (see driverFile).
	mounts map[string]bool
	// skipped are the driver files left out because the container lacks
	// their folder (a capability it was not given), and the links that
	// lead to them: links and libraries among them are left out without
	// a look in the root, which for a container of compute and utility
	// alone is every graphics, video and display file the spec lists.
	skipped map[string]bool
	// conf is the image's ld.so.conf once read (see ldConf).
	conf *ldConf
}

// ldConf reads the image's ld.so.conf once: the merge looks at it when
// the image has no cache, and the ldconfig fallback after it.
func (s *setup) ldConf() ldConf {
	if s.conf == nil {
		c := readLdConf(s.root)
		s.conf = &c
	}
	return *s.conf
}

func (s *setup) warn(format string, args ...any) {
	if s.env.Quiet {
		return
	}
	fmt.Fprintf(s.env.Stderr, "gpuctk-hook: warning: "+format+"\n", args...)
}

// chown gives what the hook made in the root to the container's root user
// when the container has a user namespace, so that it is the image's own.
func (s *setup) chown(rel string) error {
	if s.c.UID == 0 && s.c.GID == 0 {
		return nil
	}
	// In its folder where that is open already (mkdirs and the links
	// opened it), not following a link; else through os.Root.
	var err error
	dir, name := path.Split(rel)
	if d, ok := s.folders[strings.TrimSuffix(dir, "/")].(dirFD); ok {
		if err = unix.Fchownat(int(d), name, s.c.UID, s.c.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			err = &fs.PathError{Op: "lchown", Path: rel, Err: err}
		}
	} else {
		err = s.root.Lchown(rel, s.c.UID, s.c.GID)
	}
	if err != nil {
		return fmt.Errorf("/%s: give it to the container's root (%d:%d): %w", rel, s.c.UID, s.c.GID, err)
	}
	return nil
}

// lockRoot opens the container root's folder and takes an exclusive
// flock on it, waiting at most wait for another holder; closing the
// descriptor lets go. The descriptor is also where the folders the hook
// works in are opened from (openFolder). The wait is bounded: a process
// in a container sharing the root can flock its "/" and never let go.
func lockRoot(rootPath string, wait time.Duration) (int, error) {
	fd, err := unix.Open(rootPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("container root: %w", &fs.PathError{Op: "open", Path: rootPath, Err: err})
	}
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return fd, nil
		}
		if err == unix.EWOULDBLOCK && time.Since(start) > wait {
			err = fmt.Errorf("held by another process for over %v (a hook of a container sharing the root, or a process in one)", wait)
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			unix.Close(fd)
			return -1, fmt.Errorf("container root: lock: %w", err)
		}
	}
}

// noCache means the container has no linker cache this hook can merge
// into: none at all (missing), one in a format it does not write, or a
// file it will not read. ldconfig rebuilds it.
type noCache struct {
	error
	missing bool
}

// maxCacheSize caps the image's /etc/ld.so.cache the hook reads. ldconfig
// writes about 100 bytes per library: 8 MiB is some 80,000 libraries, over
// ten times the largest distribution install, while parsing and rewriting
// it stays within tens of MiB. A larger cache is rebuilt by ldconfig.
const maxCacheSize = 8 << 20

// cacheFlags marks entries for this machine's libraries, as ldconfig does.
func cacheFlags() int32 {
	if runtime.GOARCH == "arm64" {
		return ldcache.FlagELFLibc6 | ldcache.FlagAArch64Lib64
	}
	return ldcache.FlagELFLibc6 | ldcache.FlagX8664Lib64
}

// mergeCache adds the libraries to the container's /etc/ld.so.cache and
// writes it back atomically, inside the root, in the same format: the
// image is not rescanned, so the cost does not grow with the image.
func (s *setup) mergeCache(first []ldcache.Entry, libraries []string) error {
	// Read and written through the folder: each call on the root opens
	// etc again, and its files would join the poller.
	etc, err := s.folder("etc")
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return &noCache{error: fmt.Errorf("/etc: %w", err), missing: true}
	}
	if err != nil {
		return fmt.Errorf("linker cache: /etc: %w", err)
	}
	// The first entries win over later ones of the same SONAME: Add keeps
	// their order, and the loader takes the first it finds.
	entries := append(make([]ldcache.Entry, 0, len(first)+len(libraries)), first...)
	for _, l := range libraries {
		entries = append(entries, ldcache.Entry{Flags: cacheFlags(), Key: path.Base(l), Value: path.Clean(l)})
	}
	var out []byte
	data, err := readImageFile(etc, "ld.so.cache", "/etc/ld.so.cache", maxCacheSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// An image with no cache and no library folders of its own
		// (busybox, static programs) gets a cache of the driver's
		// libraries alone: ldconfig would add nothing the loader does
		// not find in its default folders anyway, at a millisecond or
		// more. Folders named in ld.so.conf are ldconfig's to scan.
		if conf := s.ldConf(); conf.Problem != "" || len(conf.Folders) > 0 {
			return &noCache{error: err, missing: true}
		}
		s.env.debugf("no linker cache and no ld.so.conf folders in the image: writing one of the driver's libraries")
		// What ldconfig -p says of a cache the hook writes from nothing.
		c := &ldcache.Cache{Generator: "gpuctk-hook"}
		c.Add(entries...)
		out, err = c.Marshal()
	case errors.Is(err, errNotRegular) || errors.Is(err, errTooLarge):
		return &noCache{error: err}
	case err != nil:
		return fmt.Errorf("linker cache: %w", err)
	default:
		// The image's entries and string table are kept as they are,
		// the driver's entries put in their places and their names
		// appended: laying every string out again, as ldconfig does,
		// or decoding each entry, cost more than the rest of the merge.
		out, err = ldcache.Merge(data, entries...)
		if errors.Is(err, ldcache.ErrFormat) {
			return &noCache{error: fmt.Errorf("/etc/ld.so.cache: %w", err)}
		}
	}
	if err != nil {
		return fmt.Errorf("linker cache: %w", err)
	}
	// Not synced, unlike the files gpuctk owns on the host: fsync costs a
	// millisecond or more on every container start (tens under I/O load),
	// for a file in a root being created, which a crash loses anyway; a
	// cache cut short by one is refused by Parse at the next start (hooks
	// run again) and rebuilt by ldconfig, and ignored by the loader.
	if err := atomicfile.WriteFileIn(etc, "ld.so.cache", out, 0o644, false); err != nil {
		return fmt.Errorf("write /etc/ld.so.cache: %w", err)
	}
	return s.chown("etc/ld.so.cache")
}

// hardlink makes link, in the folder of target, another name of target,
// a symlink the hook made or found right there (setup.symlinks): the
// SONAME and .so links of a driver library then resolve as the library's
// own link does, to the driver folder's file. A name costs no inode: on
// ext4 and in an overlay's upper layer, a symlink is a new inode each,
// four times the time of a name (44 links a container, the half of them
// SONAME and .so links). linked is false where the file system refuses
// (a hard link limit, fs.protected_hardlinks in a user namespace, a file
// system without hard links) or the name is taken by anything but target
// itself: symlink then decides, as for any link.
func (s *setup) hardlink(target, link string) (linked bool, err error) {
	rel := strings.TrimPrefix(path.Clean(link), "/")
	dir, base := path.Split(rel)
	d, err := s.folder(dir)
	if err != nil {
		return false, fmt.Errorf("link %s: %w", link, err)
	}
	err = d.Link(target, base)
	if err == nil {
		return true, nil // the same inode as target: owned as it is
	}
	if !errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	have, err := d.Lstat(base)
	if err != nil || have.Mode()&fs.ModeSymlink == 0 {
		return false, nil // the image's own file or folder: symlink warns
	}
	// Made by a run before this one (a restarted container): right as it
	// is, and owned as target is.
	if want, err := d.Lstat(target); err == nil && oneFile(have, want) {
		return true, nil
	}
	// Made by an older hook as a link of its own: symlink keeps it, and
	// gives it to the container's root as it does any link found right.
	if cur, err := d.Readlink(base); err == nil && cur == target {
		return false, nil
	}
	// The image's link, leading elsewhere: replaced, as symlink does.
	if err := d.Remove(base); err != nil {
		return false, fmt.Errorf("link %s: %w", link, err)
	}
	return d.Link(target, base) == nil, nil
}

// oneFile reports whether a and b, of a folder's Lstat (through a dirFD or
// os.Root), are the same file.
func oneFile(a, b fs.FileInfo) bool {
	id := func(fi fs.FileInfo) (dev, ino uint64, ok bool) {
		switch st := fi.Sys().(type) {
		case *unix.Stat_t:
			return st.Dev, st.Ino, true
		case *syscall.Stat_t:
			return st.Dev, st.Ino, true
		}
		return 0, 0, false
	}
	da, ia, okA := id(a)
	db, ib, okB := id(b)
	return okA && okB && da == db && ia == ib
}

// symlink makes link point at target inside root. An existing symlink is
// replaced; anything else at that path belongs to the image and goes to
// taken, whose answer is symlink's; a nil taken leaves it alone with a
// warning.
func (s *setup) symlink(target, link string, taken func(d folder, base string, st fs.FileInfo) error) error {
	rel := strings.TrimPrefix(path.Clean(link), "/")
	// Through the link's folder, opened once for all its links: each call
	// on the root resolves the whole path again, a few syscalls per
	// component, and the links share two or three folders.
	dir, base := path.Split(rel)
	d, err := s.folder(dir)
	if err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	// Most links are new: made at once, checked only when the name is
	// taken.
	err = d.Symlink(target, base)
	if err == nil {
		return s.ownSymlink(rel)
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("link %s -> %s: %w", link, target, err)
	}
	st, err := d.Lstat(base)
	switch {
	case err == nil && st.Mode()&fs.ModeSymlink != 0:
		if cur, err := d.Readlink(base); err == nil && cur == target {
			return s.ownSymlink(rel)
		}
		if err := d.Remove(base); err != nil {
			return fmt.Errorf("link %s: %w", link, err)
		}
	case err == nil && taken != nil:
		return taken(d, base, st)
	case err == nil:
		s.warn("%s exists in the image and is not a link; left as it is", link)
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("link %s: %w", link, err)
	}
	if err := d.Symlink(target, base); err != nil {
		return fmt.Errorf("link %s -> %s: %w", link, target, err)
	}
	return s.ownSymlink(rel)
}

// ownSymlink records rel, a symlink symlink made or found right, and
// gives it to the container's root (chown).
func (s *setup) ownSymlink(rel string) error {
	if s.symlinks == nil {
		s.symlinks = map[string]bool{}
	}
	s.symlinks["/"+rel] = true
	return s.chown(rel)
}

// folder opens the folder rel of the container root, once, resolving it
// inside the root only (openFolder, or os.Root where openat2 is missing).
func (s *setup) folder(rel string) (folder, error) {
	rel = strings.TrimSuffix(rel, "/")
	if rel == "" {
		return s.root, nil
	}
	if d, ok := s.folders[rel]; ok {
		return d, nil
	}
	if err, ok := s.missing[rel]; ok {
		return nil, err
	}
	var d folder
	var err error
	if !s.slowFolders {
		d, err = openFolder(s.rootFD, rel)
		if errors.Is(err, errors.ErrUnsupported) {
			s.slowFolders = true
		}
	}
	if s.slowFolders {
		d, err = s.root.OpenRoot(rel)
	}
	if err != nil {
		// Asked again for each GPU's DRM links, each graphics library:
		// answered once.
		if s.missing == nil {
			s.missing = map[string]error{}
		}
		s.missing[rel] = err
		return nil, err
	}
	if s.folders == nil {
		s.folders = map[string]folder{}
	}
	s.folders[rel] = d
	return d, nil
}

// close closes the folders folder opened.
func (s *setup) close() {
	for _, d := range s.folders {
		switch d := d.(type) {
		case dirFD:
			d.close()
		case *os.Root:
			d.Close()
		}
	}
}

// Limits bound the ldconfig child the hook runs.
type Limits struct {
	// Timeout is how long ldconfig may run before it is killed.
	Timeout time.Duration
	// Memory is its address-space limit (RLIMIT_AS), in bytes.
	Memory uint64
	// FileSize is the largest file it may write (RLIMIT_FSIZE), in bytes.
	FileSize uint64
	// Lock is how long Setup waits for another hook's lock on the
	// container root (see lockRoot); zero: 4 x (Timeout + 1 s).
	Lock time.Duration
	// Self is the program re-executed to set the limits before exec'ing
	// ldconfig; empty means /proc/self/exe, which must call ExecLimited
	// when its first argument is ExecLimitedArg.
	Self string
}

// Default limits of the ldconfig child. ldconfig over a large image (a
// copy of a desktop's /usr/lib, some 2,000 libraries) runs in well under
// a second and a few MiB; the timeout leaves room for a slow disk, and
// the file limit is the largest cache the hook would read back.
const (
	DefaultTimeout  = 10 * time.Second
	DefaultMemory   = 512 << 20
	DefaultFileSize = maxCacheSize
)

func (l Limits) withDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.Memory == 0 {
		l.Memory = DefaultMemory
	}
	if l.FileSize == 0 {
		l.FileSize = DefaultFileSize
	}
	if l.Lock <= 0 {
		// A hook holds the lock no longer than its ldconfig runs and
		// is reaped: time for a few such hooks ahead.
		l.Lock = 4 * (l.Timeout + time.Second)
	}
	if l.Self == "" {
		l.Self = "/proc/self/exe"
	}
	return l
}
