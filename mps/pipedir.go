package mps

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// clearDir removes what is in dir, keeping dir itself: containers that
// have it bind-mounted see the next daemon's socket there.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
