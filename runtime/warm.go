package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpuctk/gpuctk/config"
)

// WarmCache writes gpuctk-runtime's cache entry for the spec dirs as they
// are now, right after gpuctk wrote specPath, so that the first create
// after a spec change is as fast as any other: `gpuctk cdi generate` and
// the device plugin call it. It does nothing when specPath is not in one
// of cfg's [cdi] spec-dirs, when [runtime] cache-dir is empty, or when the
// cache folder does not exist (gpuctk-runtime makes it at its first
// create: a host that does not use the runtime gets no cache).
//
// resolve makes the entry where the spec dirs hold more than gpuctk's
// spec (the CDI library's answer; nil: only gpuctk's own spec is cached).
//
// It keeps the runtime's rule for what may be cached: the spec dirs'
// fingerprint must be the same before and after they were read, and
// their newest change older than racyWindow, since a rewrite in place
// within the same timestamp tick would leave the fingerprint as it was.
// A spec written just now is that new, so WarmCache waits out the window
// (at most 50 ms), then checks the fingerprint again. When the specs
// changed meanwhile it writes nothing: the runtime resolves them.
func WarmCache(cfg *config.Config, specPath string, resolve func(dirs []string) ([]byte, error)) (bool, error) {
	if cfg.Runtime.CacheDir == "" {
		return false, nil
	}
	abs, err := filepath.Abs(specPath)
	if err != nil {
		return false, err
	}
	dirs := cfg.CDI.SpecDirs
	dir, err := os.Stat(filepath.Dir(abs))
	if err != nil {
		return false, err
	}
	// The same folder by another path (/var/run is /run) counts.
	if !slices.ContainsFunc(dirs, func(d string) bool {
		fi, err := os.Stat(d)
		return err == nil && os.SameFile(fi, dir)
	}) {
		return false, nil
	}
	if fi, err := os.Lstat(cfg.Runtime.CacheDir); err != nil || !fi.IsDir() {
		return false, nil
	}
	fp, newest := fingerprint(dirs)
	if wait := racyWindow - time.Since(newest); wait > 0 {
		time.Sleep(wait + time.Millisecond)
		fp, _ = fingerprint(dirs)
	}
	data, err := GpuctkEntry(dirs)
	if err != nil {
		if resolve == nil {
			return false, nil
		}
		if data, err = resolve(dirs); err != nil {
			return false, err
		}
	}
	if !whole(data) {
		return false, errors.New("resolved devices in a format gpuctk-runtime does not read")
	}
	if fp2, newest := fingerprint(dirs); fp2 != fp || time.Since(newest) <= racyWindow {
		return false, nil
	}
	root, err := openCache(cfg.Runtime.CacheDir)
	if err != nil {
		return false, fmt.Errorf("gpuctk-runtime's cache %s: %w", cfg.Runtime.CacheDir, err)
	}
	defer root.Close()
	if err := writeCache(root, fp, data, true); err != nil {
		return false, fmt.Errorf("gpuctk-runtime's cache %s: %w", cfg.Runtime.CacheDir, err)
	}
	return true, nil
}
