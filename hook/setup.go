package hook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
)

// DefaultLdconfig is the host's ldconfig, run chrooted into the container
// root (-r) when the linker cache must be rebuilt.
const DefaultLdconfig = "/sbin/ldconfig"

// setup makes the driver libraries' links and updates the linker cache.
//
//	setup --link TARGET::LINK ... --folder DIR ... [--ldconfig PATH]
func setup(e *Env, args []string) error {
	f, err := flags(e, args, "link", "folder", "ldconfig")
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
	return updateCache(root, rootPath, ldconfig, f["folder"])
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
