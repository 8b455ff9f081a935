package runtime

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
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

// usableCacheDir makes the cache dir, or accepts an existing one, only if
// it is ours and nobody else can write it: its content goes into
// containers.
func usableCacheDir(dir string) bool {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return false
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return false
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

func deviceFile(name string) string {
	// Qualified names hold one "/" and never "%".
	return strings.ReplaceAll(name, "/", "%2F") + ".json"
}

// cachedEdits returns the edits of devices from the cache entry at dir, in
// the order the CDI library applies them: a spec's common edits before its
// first device's. unknown lists devices the entry knows not to exist, with
// the index for the message. ok is false when the entry cannot answer.
func cachedEdits(dir string, devices []string) (edits *cdi.ContainerEdits, unknown []string, index *cacheIndex, ok bool) {
	edits = &cdi.ContainerEdits{ContainerEdits: &cdispec.ContainerEdits{}}
	seen := map[int]bool{}
	for _, name := range devices {
		var d cachedDevice
		data, err := os.ReadFile(filepath.Join(dir, "devices", deviceFile(name)))
		if errors.Is(err, fs.ErrNotExist) {
			unknown = append(unknown, name)
			continue
		}
		if err != nil || json.Unmarshal(data, &d) != nil {
			return nil, nil, nil, false
		}
		if !seen[d.Spec] {
			var common cdispec.ContainerEdits
			data, err := os.ReadFile(filepath.Join(dir, "specs", fmt.Sprintf("%d.json", d.Spec)))
			if err != nil || json.Unmarshal(data, &common) != nil {
				return nil, nil, nil, false
			}
			edits.Append(&cdi.ContainerEdits{ContainerEdits: &common})
			seen[d.Spec] = true
		}
		edits.Append(&cdi.ContainerEdits{ContainerEdits: &d.Edits})
	}
	if len(unknown) == 0 {
		return edits, nil, nil, true
	}
	// A device file can be missing because the entry is being removed:
	// believe it only when the index says the device does not exist.
	index = &cacheIndex{}
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil || json.Unmarshal(data, index) != nil {
		return nil, nil, nil, false
	}
	for _, name := range unknown {
		if _, found := slices.BinarySearch(index.Devices, name); found {
			return nil, nil, nil, false
		}
	}
	return nil, unknown, index, true
}

// writeCache stores what the library resolved as the entry fp, then
// removes older entries. It is best-effort: a failure costs speed only.
func writeCache(cacheDir, fp string, cache *cdi.Cache) error {
	tmp, err := os.MkdirTemp(cacheDir, ".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, d := range []string{"specs", "devices"} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o700); err != nil {
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
			if err := writeJSON(filepath.Join(tmp, "specs", fmt.Sprintf("%d.json", id)), s.ContainerEdits); err != nil {
				return err
			}
		}
		if err := writeJSON(filepath.Join(tmp, "devices", deviceFile(name)), cachedDevice{Spec: id, Edits: d.ContainerEdits}); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(tmp, "index.json"), index); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(cacheDir, fp)); err != nil {
		// Another create got there first.
		return nil
	}
	entries, _ := os.ReadDir(cacheDir)
	for _, e := range entries {
		if e.Name() == fp {
			continue
		}
		// A .new- entry is another create's work in progress, unless a
		// crash left it behind.
		if fi, err := e.Info(); strings.HasPrefix(e.Name(), ".new-") && (err != nil || time.Since(fi.ModTime()) < time.Minute) {
			continue
		}
		os.RemoveAll(filepath.Join(cacheDir, e.Name()))
	}
	return nil
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
