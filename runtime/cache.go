package runtime

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/cdientry"
)

// The resolved-device cache keeps container start independent of the size
// of the specs. Parsing a spec through the CDI library costs about 3 ms per
// 50 KB of YAML, and the largest host's spec is several hundred KB; the
// cache holds each device's edits, as the library resolved them, and a
// create decodes only those of the devices it asks for.
//
// Layout: <cache-dir>/<fingerprint>, one file (see entryHead). The
// fingerprint hashes the spec dirs' listings and each spec file's size,
// times and inode, so any change to a spec makes a new entry; an entry that
// cannot be read is ignored and the library decides, as without a cache.
const cacheFormat = cdientry.Format

// cacheIndex is what an entry knows of the specs beside the edits: every
// device, and the specs that failed to load.
type cacheIndex struct {
	Devices []string
	Errors  []string
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

// maxCacheFile bounds what an entry may hold (see cdientry.MaxSize):
// none larger is read, none larger is written.
const maxCacheFile = cdientry.MaxSize

// mapCacheFile maps a regular file of the cache read-only, refusing a
// symlink (O_NOFOLLOW), a FIFO (opened without blocking) or an oversized
// file; release unmaps it. Mapped, not read: a create in a fresh process
// would otherwise fault in and zero a fresh heap page for each 4 KiB of
// the entry, then copy it (a fifth of its reading of the cache). Nothing
// decoded from data may point into it after release. An entry is never
// cut short in place (entries are renamed into place whole), but one cut
// short by hand would fault on access: see mappedEdits.
func mapCacheFile(r *os.Root, name string) (data []byte, release func(), err error) {
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	// Only files of our own: one planted while the folder was open to
	// others is another user's.
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || fi.Size() > maxCacheFile || !ok || int(st.Uid) != os.Geteuid() {
		return nil, nil, fmt.Errorf("%s is not a cache file", name)
	}
	if fi.Size() == 0 {
		return []byte{}, func() {}, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var merr error
	if err := rc.Control(func(fd uintptr) {
		data, merr = unix.Mmap(int(fd), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	}); err != nil {
		return nil, nil, err
	}
	if merr != nil {
		return nil, nil, fmt.Errorf("map %s: %w", name, merr)
	}
	return data, func() { unix.Munmap(data) }, nil
}

// An entry is one file, written once and renamed into place, so that a
// create reads it with one open and one read, and the first create after a
// spec change writes one file, not one per device (465 files took 10 ms):
//
//	gpuctk-runtime-cache-3
//	error	<JSON string: a spec that failed to load>
//	spec	<id>	<kind>	<JSON: the spec's common edits>
//	device	<qualified name>	<spec id>	<JSON: the device's edits>
//	end
//
// CDI device names hold no tab or newline (the library validates them).
// The last line tells a whole file from one cut short.
const (
	entryHead = cdientry.Head
	entryEnd  = cdientry.End
)

// line returns the rest of the line of data that starts with prefix,
// which must follow a newline.
func line(data []byte, prefix string) ([]byte, bool) {
	i := bytes.Index(data, []byte("\n"+prefix))
	if i < 0 {
		return nil, false
	}
	rest := data[i+1+len(prefix):]
	if j := bytes.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	return rest, true
}

// whole says whether data is an entry of this format, not cut short.
func whole(data []byte) bool {
	return bytes.HasPrefix(data, []byte(entryHead)) && bytes.HasSuffix(data, []byte(entryEnd))
}

// entryEdits returns the edits of devices from an entry's content, in
// the order the CDI library applies them: a spec's common edits before its
// first device's. unknown lists devices the entry knows not to exist, with
// the index for the message. ok is false when the entry cannot answer.
func entryEdits(data []byte, devices []string) (edits *cdispec.ContainerEdits, unknown []string, index *cacheIndex, ok bool) {
	if !whole(data) {
		return nil, nil, nil, false
	}
	edits = &cdispec.ContainerEdits{}
	seen := map[string]bool{}
	for _, name := range devices {
		if strings.ContainsAny(name, "\t\n") {
			return nil, nil, nil, false
		}
		rest, found := line(data, "device\t"+name+"\t")
		if !found {
			unknown = append(unknown, name)
			continue
		}
		id, js, _ := bytes.Cut(rest, []byte("\t"))
		d, err := decodeEdits(js)
		if err != nil {
			return nil, nil, nil, false
		}
		if !seen[string(id)] {
			rest, found := line(data, "spec\t"+string(id)+"\t")
			_, js, _ := bytes.Cut(rest, []byte("\t")) // after the kind
			if !found {
				return nil, nil, nil, false
			}
			common, err := decodeEdits(js)
			if err != nil {
				return nil, nil, nil, false
			}
			appendEdits(edits, common)
			seen[string(id)] = true
		}
		appendEdits(edits, d)
	}
	if len(unknown) == 0 {
		return edits, nil, nil, true
	}
	// The entry is whole: a device it lacks does not exist. The index is
	// for the message.
	index, ok = entryIndex(data)
	return nil, unknown, index, ok
}

// entryIndex lists the devices of an entry and the specs that failed to
// load.
func entryIndex(data []byte) (*cacheIndex, bool) {
	index := &cacheIndex{}
	for l := range bytes.SplitSeq(data, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(l, []byte("device\t")); ok {
			name, _, _ := bytes.Cut(rest, []byte("\t"))
			index.Devices = append(index.Devices, string(name))
		} else if rest, ok := bytes.CutPrefix(l, []byte("error\t")); ok {
			d := &jsonDecoder{data: rest}
			msg := d.str()
			if d.err || d.i != len(rest) {
				return nil, false
			}
			index.Errors = append(index.Errors, msg)
		}
	}
	return index, true
}

// entryCommon returns the common edits of each spec of kind in an entry,
// in the order the library lists a vendor's specs; ok is false when the
// entry cannot answer.
func entryCommon(data []byte, kind string) (edits []*cdispec.ContainerEdits, ok bool) {
	if !whole(data) {
		return nil, false
	}
	for l := range bytes.SplitSeq(data, []byte("\n")) {
		rest, found := bytes.CutPrefix(l, []byte("spec\t"))
		if !found {
			continue
		}
		_, rest, _ = bytes.Cut(rest, []byte("\t"))
		k, js, _ := bytes.Cut(rest, []byte("\t"))
		if string(k) != kind {
			continue
		}
		e, err := decodeEdits(js)
		if err != nil {
			return nil, false
		}
		edits = append(edits, e)
	}
	return edits, true
}

// writeCache stores data as the entry fp, replacing an entry of that name
// that could not answer (replace), then removes older entries. It is
// best-effort: a failure costs speed only.
func writeCache(r *os.Root, fp string, data []byte, replace bool) error {
	if len(data) > maxCacheFile {
		return errTooLarge
	}
	tmp, err := createTemp(r)
	if err != nil {
		return err
	}
	// Not synced: the entry is rebuilt from the specs whenever it is
	// missing, and one cut short by a crash lacks its end line.
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	name := filepath.Base(tmp.Name())
	if err != nil {
		r.Remove(name)
		return err
	}
	if err := r.Rename(name, fp); err != nil {
		// A folder of that name (the first format's entry, or planted):
		// out with what is ours of it, only when it could not answer.
		if replace {
			removeEntry(r, fp)
			err = r.Rename(name, fp)
		}
		if err != nil {
			r.Remove(name)
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
		// A .new- file is another create's work in progress, unless a
		// crash left it behind.
		if fi, err := e.Info(); strings.HasPrefix(name, ".new-") && (err != nil || time.Since(fi.ModTime()) < time.Minute) {
			continue
		}
		removeEntry(r, name)
	}
	return nil
}

// errTooLarge is an entry too large to cache: it would not be read back.
var errTooLarge = fmt.Errorf("resolved devices over the %d MiB an entry may hold: not cached (every create resolves them again)", maxCacheFile>>20)

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

// removeEntry removes an entry: its file, or a symlink in its place, or,
// for an entry of the first format (a folder), the files that format
// wrote in it, then the folders if that left them empty: never a file of
// another's making.
func removeEntry(r *os.Root, entry string) {
	fi, err := r.Lstat(entry)
	if err != nil {
		return
	}
	if !fi.IsDir() {
		if fi.Mode().IsRegular() || fi.Mode().Type() == fs.ModeSymlink {
			r.Remove(entry)
		}
		return
	}
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

// createTemp makes a new temporary entry file in r (os.CreateTemp has no
// os.Root form).
func createTemp(r *os.Root) (*os.File, error) {
	for range 100 {
		f, err := r.OpenFile(fmt.Sprintf(".new-%016x", rand.Uint64()), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return nil, errors.New("no free temporary name in the cache folder")
}
