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
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

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
	// A folder at path is left to the rename, which refuses it.
	root, base, err := openTarget(path, fs.ModeDir)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer root.Close()
	if err := writeIn(root, base, data, mode, sync, suffix, owner); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// openTarget opens the folder of path, the file to replace, and returns
// it with path's name in it, checked by checkTarget.
func openTarget(path string, let fs.FileMode) (*os.Root, string, error) {
	dir, base := splitPath(path)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", err
	}
	if err := checkTarget(root, base, let); err != nil {
		root.Close()
		return nil, "", err
	}
	return root, base, nil
}

// splitPath is path's folder ("." for none) and name.
func splitPath(path string) (dir, base string) {
	dir, base = filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	return filepath.Clean(dir), base
}

// checkTarget refuses what is at base in root unless it is nothing, a
// regular file, a symlink (replaced, not followed) or a type in let. A
// device, a FIFO or a socket at path is not a file to replace (as root,
// --output /dev/null would otherwise put a regular file in place of the
// device).
func checkTarget(root *os.Root, base string, let fs.FileMode) error {
	if fi, err := root.Lstat(base); err == nil && !fi.Mode().IsRegular() && fi.Mode()&(fs.ModeSymlink|let) == 0 {
		return fmt.Errorf("it is %s, not a file: name a file to write", filekind.Name(fi.Mode()))
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
func writeIn(root Dir, name string, data []byte, mode os.FileMode, sync bool, suffix func() uint64, owner *Owner) error {
	p, err := prepareIn(root, name, data, mode, sync, suffix, owner)
	if err != nil {
		return err
	}
	if err := p.commit(); err != nil {
		p.abort()
		return err
	}
	return nil
}

// pending is new content for name in root, written whole to the
// temporary file tmp beside it, waiting to be renamed over it. With root
// nil, the folder dir is opened again for that (see WriteFiles).
type pending struct {
	root      Dir
	dir       string
	tmp, name string
}

func (p *pending) commit() error {
	return p.in(func(root Dir) error { return root.Rename(p.tmp, p.name) })
}

func (p *pending) abort() { p.in(func(root Dir) error { return root.Remove(p.tmp) }) }

// in runs do on p's folder.
func (p *pending) in(do func(Dir) error) error {
	if p.root != nil {
		return do(p.root)
	}
	root, err := os.OpenRoot(p.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return do(root)
}

// tempName is the temporary name of base: a dot, base, ".tmp-" and a
// suffix of 12 hex digits.
func tempName(dir, base string, suffix uint64) string {
	hex := strconv.FormatUint(suffix, 16)
	return filepath.Join(dir, "."+base+".tmp-"+strings.Repeat("0", max(0, 12-len(hex)))+hex)
}

// prepareIn writes data to a new temporary file beside name in root, with
// its mode (and owner, unless nil), synced when sync is set, and closed.
func prepareIn(root Dir, name string, data []byte, mode os.FileMode, sync bool, suffix func() uint64, owner *Owner) (_ *pending, err error) {
	dir, base := filepath.Split(name)
	var tmp string
	var f *os.File
	// The name only has to be unlikely to exist: math/rand/v2 is seeded
	// from the kernel's randomness at start, so names cannot be guessed
	// ahead, and O_EXCL refuses one that exists (planted or left by a
	// crash). crypto/rand would link the FIPS module into the hook and
	// the runtime, whose start-up is on every container's critical path.
	for try := 0; ; try++ {
		tmp = tempName(dir, base, suffix())
		f, err = root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || try == 3 {
			return nil, err
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
		return nil, err
	}
	if err = f.Close(); err != nil {
		return nil, err
	}
	return &pending{root: root, tmp: tmp, name: name}, nil
}

// File is one file of WriteFiles.
type File struct {
	Path string
	Data []byte
	Mode os.FileMode
}

// maxOpenDirs bounds the folders WriteFiles keeps open between writing
// and renaming: files of one folder share its descriptor, and those of
// folders past the bound open theirs again to be renamed, so that any
// number of files fits in a small RLIMIT_NOFILE.
const maxOpenDirs = 16

// WriteFiles replaces each file's path with its data as WriteFile does,
// all or none: every new content is written and synced to its temporary
// file first, and only then are they renamed into place, so that a
// failure while writing (a full disk, a folder or a device at a path)
// leaves every file as it was. Only a rename failing part-way, which
// takes a file system gone wrong, leaves some replaced; the error then
// names them. It holds at most maxOpenDirs+1 descriptors whatever the
// number of files.
func WriteFiles(files []File) error {
	var ready []*pending
	fail := func(path string, err error) error {
		for _, p := range ready {
			p.abort()
		}
		if len(files) == 1 {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return fmt.Errorf("write %s: %w (none of the %d files written)", path, err, len(files))
	}
	roots := map[string]*os.Root{}
	defer func() {
		for _, r := range roots {
			r.Close()
		}
	}()
	for _, f := range files {
		dir, base := splitPath(f.Path)
		root, kept := roots[dir]
		if !kept {
			var err error
			if root, err = os.OpenRoot(dir); err != nil {
				return fail(f.Path, err)
			}
			if kept = len(roots) < maxOpenDirs; kept {
				roots[dir] = root
			}
		}
		p, err := prepareChecked(root, base, f)
		if !kept {
			root.Close()
			if p != nil {
				p.root, p.dir = nil, dir
			}
		}
		if err != nil {
			return fail(f.Path, err)
		}
		ready = append(ready, p)
	}
	for i, p := range ready {
		if err := p.commit(); err != nil {
			for _, q := range ready[i:] {
				q.abort()
			}
			var done []string
			for _, f := range files[:i] {
				done = append(done, f.Path)
			}
			if len(done) == 0 {
				return fmt.Errorf("write %s: %w", files[i].Path, err)
			}
			return fmt.Errorf("write %s: %w (%s replaced already)", files[i].Path, err, strings.Join(done, ", "))
		}
	}
	return nil
}

// prepareChecked is prepareIn for f at base in root, after checking what
// is there: a folder too is refused, before anything is written.
func prepareChecked(root *os.Root, base string, f File) (*pending, error) {
	if err := checkTarget(root, base, 0); err != nil {
		return nil, err
	}
	return prepareIn(root, base, f.Data, f.Mode, true, randomSuffix, nil)
}

// Reclaim is WriteFile for a path that is the caller's alone (the device
// plugin's spec, labels and copy of the hook): whatever else appeared
// there, a FIFO, a device node, a socket, a link or a folder, is replaced
// in one step, never followed or opened. It returns the kind of file it
// replaced (filekind.Name), "" for a regular file or none.
func Reclaim(path string, data []byte, mode os.FileMode) (string, error) {
	dir, base := splitPath(path)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	defer root.Close()
	p, err := prepareIn(root, base, data, mode, true, randomSuffix, nil)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	was, err := placeIn(root, p.tmp, base)
	if err != nil {
		p.abort()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return was, nil
}

// Place moves the file at tmp over path, in the same folder, as Reclaim
// does: a socket bound at a temporary name takes its place so.
func Place(tmp, path string) (string, error) {
	dir, base := splitPath(path)
	if d, _ := splitPath(tmp); d != dir {
		return "", fmt.Errorf("place %s: %s is in another folder", path, tmp)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("place %s: %w", path, err)
	}
	defer root.Close()
	was, err := placeIn(root, filepath.Base(tmp), base)
	if err != nil {
		return "", fmt.Errorf("place %s: %w", path, err)
	}
	return was, nil
}

// placeIn renames tmp over name in root. A folder at name, which a rename
// cannot replace, is exchanged with tmp in one step (RENAME_EXCHANGE) and
// then removed from where tmp was, without following its links.
func placeIn(root *os.Root, tmp, name string) (string, error) {
	fi, err := root.Lstat(name)
	was := ""
	if err == nil && !fi.Mode().IsRegular() {
		was = filekind.Name(fi.Mode())
	}
	if err != nil || !fi.IsDir() {
		return was, root.Rename(tmp, name)
	}
	d, err := root.Open(".")
	if err != nil {
		return "", err
	}
	defer d.Close()
	if err := unix.Renameat2(int(d.Fd()), tmp, int(d.Fd()), name, unix.RENAME_EXCHANGE); err != nil {
		return "", fmt.Errorf("exchange with the folder there: %w", err)
	}
	if err := root.RemoveAll(tmp); err != nil {
		return was, fmt.Errorf("the folder that was there, now %s: %w", tmp, err)
	}
	return was, nil
}
