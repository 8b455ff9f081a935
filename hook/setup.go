package hook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strings"
	"syscall"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/ldcache"
)

// DefaultLdconfig is the host's ldconfig, run chrooted into the container
// root (-r) when the linker cache must be rebuilt.
const DefaultLdconfig = "/sbin/ldconfig"

// setup makes the driver libraries' links and updates the linker cache.
//
//	setup --link TARGET::LINK ... --library SONAME-PATH ... --folder DIR ... [--ldconfig PATH]
func setup(e *Env, args []string) error {
	f, err := flags(e, args, "link", "library", "folder", "ldconfig")
	if err != nil {
		return err
	}
	rootPath, err := e.ContainerRoot()
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(rootPath)
	if err != nil {
		return fmt.Errorf("container root: %w", err)
	}
	defer root.Close()
	// Containers can share a root (podman --rootfs): their hooks would race
	// on the same links and on ldconfig's fixed temp file. One at a time.
	unlock, err := lockRoot(rootPath)
	if err != nil {
		return err
	}
	defer unlock()
	for _, l := range f["link"] {
		target, link, ok := strings.Cut(l, "::")
		if !ok || target == "" || !path.IsAbs(link) {
			return fmt.Errorf("--link %q: want TARGET::/ABSOLUTE/LINK", l)
		}
		if err := symlink(e, root, target, link); err != nil {
			return err
		}
	}
	if len(f["folder"]) == 0 {
		return nil
	}
	ldconfig := DefaultLdconfig
	if v := f["ldconfig"]; len(v) > 0 {
		ldconfig = v[len(v)-1]
	}
	for _, l := range f["library"] {
		if !path.IsAbs(l) {
			return fmt.Errorf("--library %q: want an absolute path", l)
		}
	}
	if len(f["library"]) > 0 {
		err := mergeCache(root, f["library"])
		if err == nil {
			return nil
		}
		if !errors.Is(err, errNoCache) {
			return err
		}
	}
	return updateCache(root, rootPath, ldconfig, f["folder"])
}

// lockRoot takes an exclusive flock on the container root's folder.
func lockRoot(rootPath string) (func(), error) {
	f, err := os.Open(rootPath)
	if err != nil {
		return nil, fmt.Errorf("container root: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("container root: lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// errNoCache means the container has no linker cache this hook can merge
// into: none at all, or one in a format it does not write.
var errNoCache = errors.New("no linker cache to merge into")

// cacheFlags marks entries for this machine's libraries, as ldconfig does.
var cacheFlags = func() int32 {
	switch runtime.GOARCH {
	case "arm64":
		return ldcache.FlagELFLibc6 | ldcache.FlagAArch64Lib64
	default:
		return ldcache.FlagELFLibc6 | ldcache.FlagX8664Lib64
	}
}()

// mergeCache adds the libraries to the container's /etc/ld.so.cache and
// writes it back atomically, inside the root, in the same format: the
// image is not rescanned, so the cost does not grow with the image.
func mergeCache(root *os.Root, libraries []string) error {
	data, err := root.ReadFile("etc/ld.so.cache")
	if errors.Is(err, fs.ErrNotExist) {
		return errNoCache
	}
	if err != nil {
		return fmt.Errorf("linker cache: %w", err)
	}
	c, err := ldcache.Parse(data)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoCache, err)
	}
	entries := make([]ldcache.Entry, 0, len(libraries))
	for _, l := range libraries {
		entries = append(entries, ldcache.Entry{Flags: cacheFlags, Key: path.Base(l), Value: path.Clean(l)})
	}
	c.Add(entries...)
	out, err := c.Marshal()
	if err != nil {
		return fmt.Errorf("linker cache: %w", err)
	}
	// Not synced, unlike the files gpuctk owns on the host: fsync costs a
	// millisecond or more on every container start (tens under I/O load),
	// for a file in a root being created, which a crash loses anyway; a cache cut short by one is refused by Parse at the next start
	// (hooks run again) and rebuilt by ldconfig, and ignored by the loader.
	if err := atomicfile.WriteFileIn(root, "etc/ld.so.cache", out, 0o644, false); err != nil {
		return fmt.Errorf("write etc/ld.so.cache: %w", err)
	}
	return nil
}

// symlink makes link point at target inside root. An existing symlink is
// replaced; anything else at that path belongs to the image and is left
// alone with a warning.
func symlink(e *Env, root *os.Root, target, link string) error {
	rel := strings.TrimPrefix(path.Clean(link), "/")
	st, err := root.Lstat(rel)
	switch {
	case err == nil && st.Mode()&fs.ModeSymlink != 0:
		if cur, err := root.Readlink(rel); err == nil && cur == target {
			return nil
		}
		if err := root.Remove(rel); err != nil {
			return fmt.Errorf("link %s: %w", link, err)
		}
	case err == nil:
		fmt.Fprintf(e.Stderr, "gpuctk-hook: warning: %s exists in the image and is not a link; left as it is\n", link)
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("link %s: %w", link, err)
	}
	if err := root.Symlink(target, rel); err != nil {
		return fmt.Errorf("link %s -> %s: %w", link, target, err)
	}
	return nil
}

// updateCache rebuilds the container's linker cache with the host's
// ldconfig, chrooted into the container root, with the driver's folders
// added. Nothing of the hook's environment reaches it.
func updateCache(root *os.Root, rootPath, ldconfig string, folders []string) error {
	// The image decides whether /etc exists; ldconfig needs it for the cache.
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return fmt.Errorf("linker cache: %w", err)
	}
	args := append([]string{"-r", rootPath}, folders...)
	cmd := exec.Command(ldconfig, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", ldconfig, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
