// Package atomicfile writes files so that readers see either the old
// content or the new, never a torn or missing file: write a temporary file
// in the same folder, sync it, close it, rename it over the target.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, atomically, with the given mode.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	return write(path, data, mode, true)
}

// WriteFileNoSync is WriteFile without the fsync: readers still see the
// old content or the new, but a crash may leave neither. It is for files
// that do not outlive the boot and are read at once, such as an OCI
// bundle's config.json on its way to runc, where an fsync would only add
// the disk's latency to every container start.
func WriteFileNoSync(path string, data []byte, mode os.FileMode) error {
	return write(path, data, mode, false)
}

func write(path string, data []byte, mode os.FileMode, sync bool) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if sync {
		err = tmp.Sync()
	}
	if err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
