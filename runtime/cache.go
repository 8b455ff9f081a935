package runtime

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// The resolved-device cache keeps container start independent of the size
// of the specs. Parsing a spec through the CDI library costs about 3 ms per
// 50 KB of YAML, and the largest host's spec is several hundred KB; the
// cache holds each device's edits, as the library resolved them, in a
// file of its own, so a create reads one or two small files.
//
// Layout: <cache-dir>/<fingerprint>/ with index.json (every device, spec
// errors), specs/<n>.json (a spec's common edits) and devices/<name>.json.
// The fingerprint hashes the spec dirs' listings and each spec file's size,
// times and inode, so any change to a spec makes a new entry; an entry that
// cannot be read is ignored and the library decides, as without a cache.
const cacheFormat = "gpuctk-runtime-cache-1"

type cacheIndex struct {
	Devices []string `json:"devices"`
	Errors  []string `json:"errors,omitempty"`
}

type cachedDevice struct {
	Spec  int                    `json:"spec"`
	Edits cdispec.ContainerEdits `json:"edits"`
}

// fingerprint identifies the current content of the spec dirs. It hashes
// file metadata that only root can change, to tell versions apart, not to
// resist forgery: FNV-128a, since crypto/sha256 would link the FIPS module
// and its start-up work into every create. It also
// returns the newest change time among the specs: a spec changed within a
// timestamp tick of now could change again unseen (git's racy-index case).
func fingerprint(dirs []string) (string, time.Time) {
	var newest time.Time
	h := fnv.New128a()
	fmt.Fprintf(h, "%s\x00", cacheFormat)
	for _, dir := range dirs {
		fmt.Fprintf(h, "dir %s\x00", dir)
		entries, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintf(h, "error %v\x00", errors.Is(err, fs.ErrNotExist))
			continue
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); ext != ".json" && ext != ".yaml" {
				continue
			}
			fi, err := os.Stat(filepath.Join(dir, e.Name()))
			if err != nil {
				fmt.Fprintf(h, "file %s error\x00", e.Name())
				continue
			}
			st, _ := fi.Sys().(*syscall.Stat_t)
			if st == nil {
				st = &syscall.Stat_t{}
			}
			fmt.Fprintf(h, "file %s %v %d %d %d %d.%d %d\x00", e.Name(), fi.Mode(), fi.Size(), fi.ModTime().UnixNano(),
				st.Ino, st.Ctim.Sec, st.Ctim.Nsec, st.Dev)
			if c := time.Unix(st.Ctim.Sec, st.Ctim.Nsec); c.After(newest) {
				newest = c
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), newest
}

// openCache opens the cache folder, making it (0700) where it is missing,
// through os.Root, so that nothing in it leads outside. It refuses a
// folder it did not make: a symlink, something not a folder, or a folder
// of another user's; those are left alone, and creates go without a cache.
// A folder of ours that others may read or write is made 0700 again (its
// content goes into containers), and readCacheFile trusts no file another
// user may have put there meanwhile.
func openCache(dir string) (*os.Root, error) {
	dir = filepath.Clean(dir)
	parent, base := filepath.Split(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	p, err := os.OpenRoot(parent)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if err := p.Mkdir(base, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	fi, err := p.Lstat(base)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("cache folder %s is a %v, not a folder: left alone", dir, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("cache folder %s belongs to another user: left alone", dir)
	}
	r, err := p.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	// The folder checked is the folder opened: not swapped in between.
	if now, err := r.Stat("."); err != nil || !os.SameFile(fi, now) {
		r.Close()
		return nil, fmt.Errorf("cache folder %s changed while it was opened", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := r.Chmod(".", 0o700); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// maxCacheFile bounds what a cache file may hold: the largest host's
// device edits are a few KiB.
const maxCacheFile = 4 << 20

// readCacheFile reads a regular file of the cache, refusing a symlink, a
// FIFO (opened without blocking) or an oversized file.
func readCacheFile(r *os.Root, name string) ([]byte, error) {
	if fi, err := r.Lstat(name); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a %v", name, fi.Mode().Type())
	}
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Only files of our own: one planted while the folder was open to
	// others is another user's.
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || fi.Size() > maxCacheFile || !ok || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s is not a cache file", name)
	}
	return io.ReadAll(io.LimitReader(f, maxCacheFile))
}

func deviceFile(name string) string {
	// Qualified names hold one "/" and never "%".
	return strings.ReplaceAll(name, "/", "%2F") + ".json"
}

// cachedEdits returns the edits of devices from the cache entry fp, in
// the order the CDI library applies them: a spec's common edits before its
// first device's. unknown lists devices the entry knows not to exist, with
// the index for the message. ok is false when the entry cannot answer;
// found says whether there was an entry at all.
func cachedEdits(r *os.Root, fp string, devices []string) (edits *cdi.ContainerEdits, unknown []string, index *cacheIndex, ok, found bool) {
	if _, err := r.Lstat(fp); err != nil {
		return nil, nil, nil, false, false
	}
	edits = &cdi.ContainerEdits{ContainerEdits: &cdispec.ContainerEdits{}}
	seen := map[int]bool{}
	for _, name := range devices {
		var d cachedDevice
		data, err := readCacheFile(r, path.Join(fp, "devices", deviceFile(name)))
		if errors.Is(err, fs.ErrNotExist) {
			unknown = append(unknown, name)
			continue
		}
		if err != nil || json.Unmarshal(data, &d) != nil {
			return nil, nil, nil, false, true
		}
		if !seen[d.Spec] {
			var common cdispec.ContainerEdits
			data, err := readCacheFile(r, path.Join(fp, "specs", fmt.Sprintf("%d.json", d.Spec)))
			if err != nil || json.Unmarshal(data, &common) != nil {
				return nil, nil, nil, false, true
			}
			edits.Append(&cdi.ContainerEdits{ContainerEdits: &common})
			seen[d.Spec] = true
		}
		edits.Append(&cdi.ContainerEdits{ContainerEdits: &d.Edits})
	}
	if len(unknown) == 0 {
		return edits, nil, nil, true, true
	}
	// A device file can be missing because the entry is being removed:
	// believe it only when the index says the device does not exist.
	index = &cacheIndex{}
	data, err := readCacheFile(r, path.Join(fp, "index.json"))
	if err != nil || json.Unmarshal(data, index) != nil {
		return nil, nil, nil, false, true
	}
	for _, name := range unknown {
		if _, found := slices.BinarySearch(index.Devices, name); found {
			return nil, nil, nil, false, true
		}
	}
	return nil, unknown, index, true, true
}

// writeCache stores what the library resolved as the entry fp, replacing
// an entry of that name that could not answer (replace), then removes
// older entries. It is best-effort: a failure costs speed only.
func writeCache(r *os.Root, fp string, cache *cdi.Cache, replace bool) error {
	tmp, err := mkdirTemp(r)
	if err != nil {
		return err
	}
	defer removeEntry(r, tmp)
	for _, d := range []string{"specs", "devices"} {
		if err := r.Mkdir(path.Join(tmp, d), 0o700); err != nil {
			return err
		}
	}
	index := cacheIndex{Devices: cache.ListDevices()}
	for path, errs := range cache.GetErrors() {
		index.Errors = append(index.Errors, fmt.Sprintf("%s: %v", path, errors.Join(errs...)))
	}
	slices.Sort(index.Errors)
	specIDs := map[*cdi.Spec]int{}
	for _, name := range index.Devices {
		d := cache.GetDevice(name)
		if d == nil {
			continue
		}
		s := d.GetSpec()
		id, ok := specIDs[s]
		if !ok {
			id = len(specIDs)
			specIDs[s] = id
			if err := writeJSON(r, path.Join(tmp, "specs", fmt.Sprintf("%d.json", id)), s.ContainerEdits); err != nil {
				return err
			}
		}
		if err := writeJSON(r, path.Join(tmp, "devices", deviceFile(name)), cachedDevice{Spec: id, Edits: d.ContainerEdits}); err != nil {
			return err
		}
	}
	if err := writeJSON(r, path.Join(tmp, "index.json"), index); err != nil {
		return err
	}
	if err := r.Rename(tmp, fp); err != nil {
		if !replace {
			return nil // another create got there first
		}
		// A corrupt entry of this name: out with what is ours of it. What
		// is not (a planted file) keeps it, and the rename fails again.
		removeEntry(r, fp)
		if err := r.Rename(tmp, fp); err != nil {
			return err
		}
	}
	dir, err := r.Open(".")
	if err != nil {
		return err
	}
	defer dir.Close()
	entries, _ := dir.ReadDir(maxEntries)
	for _, e := range entries {
		name := e.Name()
		if name == fp || !isEntryName(name) {
			continue // not ours to remove
		}
		// A .new- entry is another create's work in progress, unless a
		// crash left it behind.
		if fi, err := e.Info(); strings.HasPrefix(name, ".new-") && (err != nil || time.Since(fi.ModTime()) < time.Minute) {
			continue
		}
		removeEntry(r, name)
	}
	return nil
}

// maxEntries bounds the names read from a cache folder, which holds a
// handful of entries of a few files each unless something else put files
// there.
const maxEntries = 10000

// isEntryName says whether name is one the cache gives its entries: a
// fingerprint or a temporary folder.
func isEntryName(name string) bool {
	if strings.HasPrefix(name, ".new-") {
		return true
	}
	if len(name) != 32 {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}

// removeEntry removes the files the cache writes in entry, then the
// folders if that left them empty: never a file of another's making.
func removeEntry(r *os.Root, entry string) {
	for _, sub := range []string{"specs", "devices"} {
		d := path.Join(entry, sub)
		if fi, err := r.Lstat(d); err != nil || !fi.IsDir() {
			continue
		}
		f, err := r.Open(d)
		if err != nil {
			continue
		}
		names, _ := f.ReadDir(maxEntries)
		f.Close()
		for _, e := range names {
			// A symlink in place of a file of ours goes too: removing it
			// never touches what it points at.
			if (e.Type().IsRegular() || e.Type() == fs.ModeSymlink) && strings.HasSuffix(e.Name(), ".json") {
				r.Remove(path.Join(d, e.Name()))
			}
		}
		r.Remove(d)
	}
	if fi, err := r.Lstat(path.Join(entry, "index.json")); err == nil && (fi.Mode().IsRegular() || fi.Mode().Type() == fs.ModeSymlink) {
		r.Remove(path.Join(entry, "index.json"))
	}
	r.Remove(entry)
}

// mkdirTemp makes a new temporary entry folder in r (os.MkdirTemp has no
// os.Root form).
func mkdirTemp(r *os.Root) (string, error) {
	for range 100 {
		name := fmt.Sprintf(".new-%016x", rand.Uint64())
		err := r.Mkdir(name, 0o700)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", errors.New("no free temporary name in the cache folder")
}

func writeJSON(r *os.Root, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
