// Package atomicfile writes files so that readers see either the old
// content or the new, never a torn or missing file: write a temporary file
// in the same folder, sync it, close it, rename it over the target.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/gpuctk/gpuctk/internal/filekind"
)

// WriteFile replaces path with data, atomically, with the given mode. A
// path that is a device, a FIFO or a socket is refused, not replaced.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	return writePath(path, data, mode, true, randomSuffix, nil)
}

// Owner is a file's user and group ids.
type Owner struct{ UID, GID int }

// WriteFileAs is WriteFile for a file that keeps another owner (a
// rootless engine's config, edited as root): the new content is owner's
// from the moment it replaces the old.
func WriteFileAs(path string, data []byte, mode os.FileMode, owner Owner) error {
	return writePath(path, data, mode, true, randomSuffix, &owner)
}

// WriteFileNoSync is WriteFile without the fsync: readers still see the
// old content or the new, but a crash may leave neither. It is for files
// that do not outlive the boot and are read at once, such as an OCI
// bundle's config.json on its way to runc, where an fsync would only add
// the disk's latency to every container start.
func WriteFileNoSync(path string, data []byte, mode os.FileMode) error {
	return writePath(path, data, mode, false, randomSuffix, nil)
}

func writePath(path string, data []byte, mode os.FileMode, sync bool, suffix func() uint64, owner *Owner) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer root.Close()
	// A device, a FIFO or a socket at path is not a file to replace: as
	// root, --output /dev/null would otherwise put a regular file in
	// place of the device.
	if fi, err := root.Lstat(base); err == nil && !fi.Mode().IsRegular() && fi.Mode()&(fs.ModeSymlink|fs.ModeDir) == 0 {
		return fmt.Errorf("write %s: it is %s, not a file: name a file to write", path, filekind.Name(fi.Mode()))
	}
	if err := writeIn(root, base, data, mode, sync, suffix, owner); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// randomSuffix names temporary files.
func randomSuffix() uint64 { return rand.Uint64() >> 16 }

// Dir is a folder files are written in by names relative to it, which
// resolve inside it: an *os.Root, or a folder of gpuctk-hook's opened
// with one openat2.
type Dir interface {
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
}

// WriteFileIn replaces name, a path inside root, atomically: every step
// resolves inside root, so a symlink cannot redirect the write out of it,
// and the rename replaces a symlink at name rather than following it. With
// sync false the data is not fsynced (see WriteFileNoSync).
func WriteFileIn(root Dir, name string, data []byte, mode os.FileMode, sync bool) error {
	return writeIn(root, name, data, mode, sync, randomSuffix, nil)
}

// writeIn is WriteFileIn with the temporary names' suffixes from suffix,
// and the file given to owner unless it is nil.
func writeIn(root Dir, name string, data []byte, mode os.FileMode, sync bool, suffix func() uint64, owner *Owner) (err error) {
	dir, base := filepath.Split(name)
	var tmp string
	var f *os.File
	// The name only has to be unlikely to exist: math/rand/v2 is seeded
	// from the kernel's randomness at start, so names cannot be guessed
	// ahead, and O_EXCL refuses one that exists (planted or left by a
	// crash). crypto/rand would link the FIPS module into the hook and
	// the runtime, whose start-up is on every container's critical path.
	for try := 0; ; try++ {
		tmp = filepath.Join(dir, fmt.Sprintf(".%s.tmp-%012x", base, suffix()))
		f, err = root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || try == 3 {
			return err
		}
	}
	defer func() {
		if err != nil {
			root.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil && owner != nil {
		// Before the mode: chown clears set-id bits.
		err = f.Chown(owner.UID, owner.GID)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return root.Rename(tmp, name)
}
