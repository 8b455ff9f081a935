// Package cdiresolve loads CDI spec dirs as CDI runtimes resolve them,
// and turns them into a gpuctk-runtime cache entry (internal/cdientry).
// It is linked by gpuctk (`cdi list`, `cdi generate`'s check of its
// folder, the hidden `cdi resolve` command that gpuctk-runtime runs for
// specs gpuctk did not write) and the device plugin, never by
// gpuctk-runtime: the library's package init (go-yaml, regexp, fsnotify)
// would run at every container start.
//
// The spec dirs hold other vendors' files. The CDI library's cache reads
// each *.yaml and *.json with os.ReadFile, so a FIFO there blocks it for
// ever, /dev/zero runs it out of memory, and specs defining the same
// names cost an error per name per pair of files. Load therefore reads
// each file through the gate for files others control
// (readfile.Regular), hands the library only the bytes read (its
// ReadSpec parses and validates them, as for any spec), and resolves the
// devices as the library's cache does, with conflicts found in time
// linear in the names and reported once per file.
package cdiresolve

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuctk/gpuctk/internal/cdientry"
	"github.com/gpuctk/gpuctk/internal/filekind"
	"github.com/gpuctk/gpuctk/internal/plural"
	"github.com/gpuctk/gpuctk/internal/quote"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

// Spec is a spec file loaded.
type Spec struct {
	*cdi.Spec
	Path     string // the file it was read from
	Priority int    // the index of its folder in the spec dirs
}

// FileError is what kept a file from giving its devices.
type FileError struct {
	Path string
	Err  error
}

func (e FileError) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap gives errors.Is and errors.As the cause.
func (e FileError) Unwrap() error { return e.Err }

// Set is the spec dirs as CDI runtimes resolve them.
type Set struct {
	// Specs are the files loaded, in the order read: folder by folder,
	// by name in each.
	Specs []Spec
	// Errors are the files that were not loaded, in the order read.
	Errors []FileError
	// Conflicts are the files defining names that another file of their
	// folder defines, in the order read: one error each.
	Conflicts []FileError
	// Devices are the devices that resolve, by qualified name: each
	// from the latest folder defining it, none defined twice in a
	// folder, as the library's cache resolves them.
	Devices map[string]*cdi.Device
	// Defined lists, per qualified name, the indexes in Specs of the
	// specs defining it, in the order read.
	Defined map[string][]int

	paths map[*cdi.Spec]string
}

// Path returns the file a loaded spec was read from.
func (s *Set) Path(spec *cdi.Spec) string { return s.paths[spec] }

// Load reads the CDI specs of dirs (their *.yaml and *.json files; a
// missing folder holds none) through the gate for files others control.
func Load(dirs []string) *Set {
	s := &Set{Devices: map[string]*cdi.Device{}, Defined: map[string][]int{}, paths: map[*cdi.Spec]string{}}
	for prio, dir := range dirs {
		dir = filepath.Clean(dir)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			s.Errors = append(s.Errors, FileError{dir, err})
			continue
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); e.IsDir() || ext != ".json" && ext != ".yaml" {
				continue // as the library skips them
			}
			path := filepath.Join(dir, e.Name())
			spec, err := ReadSpec(path, prio)
			if err != nil {
				s.Errors = append(s.Errors, FileError{path, err})
				continue
			}
			s.Specs = append(s.Specs, Spec{Spec: spec, Path: path, Priority: prio})
			s.paths[spec] = path
		}
	}
	s.resolve()
	return s
}

// ReadSpec reads a spec file through readfile.Regular, then parses and
// validates it with the CDI library's ReadSpec, as loaded from path with
// priority prio. Errors name no path: callers do.
func ReadSpec(path string, prio int) (*cdi.Spec, error) {
	data, err := readfile.Regular(path, cdientry.MaxSpecSize)
	var (
		nr *readfile.NotRegularError
		tl *readfile.TooLargeError
		pe *os.PathError
	)
	switch {
	case errors.As(err, &nr):
		return nil, fmt.Errorf("%s, not a spec file: skipped (CDI runtimes that read it block or fail: remove it)", filekind.Name(nr.Mode))
	case errors.As(err, &tl):
		return nil, fmt.Errorf("over the %d MiB a spec may have: skipped (CDI runtimes that read it run out of memory: remove it)", cdientry.MaxSpecSize>>20)
	case errors.As(err, &pe):
		return nil, pe.Err
	case err != nil:
		return nil, err
	}
	// The library reads specs by path alone: it is given the bytes read,
	// in a memory file, and never the file itself.
	fd, err := unix.MemfdCreate("cdi-spec", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memory file for the spec: %w", err)
	}
	f := os.NewFile(uintptr(fd), "cdi-spec")
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return nil, fmt.Errorf("memory file for the spec: %w", err)
	}
	at := "/proc/self/fd/" + strconv.Itoa(fd)
	spec, err := cdi.ReadSpec(at, prio)
	if err != nil {
		// The library names the file it read: ours is no one's. It
		// quotes what it refuses, which a spec of megabytes may make
		// megabytes: bounded.
		msg := strings.ReplaceAll(err.Error(), " "+strconv.Quote(at), "")
		return nil, errors.New(quote.Clip(msg, maxError))
	}
	return spec, nil
}

// maxError bounds the message of a spec that does not load.
const maxError = 1000

// resolve fills Devices and Defined as the library's cache resolves
// names: a later folder's device replaces an earlier's, and a name two
// files of one folder define resolves from none (not even from a later
// folder). Each file with such names gets one error.
func (s *Set) resolve() {
	holder := map[string]int{} // name -> the spec it resolves from so far
	conflicted := map[string]bool{}
	for i, sp := range s.Specs {
		for _, d := range sp.Devices {
			dev := sp.GetDevice(d.Name)
			if dev == nil {
				continue
			}
			q := dev.GetQualifiedName()
			s.Defined[q] = append(s.Defined[q], i)
			if h, ok := holder[q]; ok && s.Specs[h].Priority == sp.Priority {
				conflicted[q] = true
				continue
			}
			holder[q] = i
			s.Devices[q] = dev
		}
	}
	// Per file, its names defined twice in its folder and a few of the
	// other files: work bounded per definition, whatever the number of
	// files.
	const shown = 3
	names := map[int][]string{}
	others := map[int][]string{}
	for _, q := range slices.Sorted(maps.Keys(conflicted)) {
		delete(s.Devices, q)
		folders := map[int][]int{} // priority -> the specs defining q
		for _, i := range s.Defined[q] {
			folders[s.Specs[i].Priority] = append(folders[s.Specs[i].Priority], i)
		}
		for _, defs := range folders {
			if len(defs) < 2 {
				continue
			}
			for _, i := range defs {
				names[i] = append(names[i], q)
				for _, j := range defs {
					if len(others[i]) == shown {
						break
					}
					if j != i && !slices.Contains(others[i], s.Specs[j].Path) {
						others[i] = append(others[i], s.Specs[j].Path)
					}
				}
			}
		}
	}
	for _, i := range slices.Sorted(maps.Keys(names)) {
		s.Conflicts = append(s.Conflicts, FileError{s.Specs[i].Path, fmt.Errorf(
			"conflicting devices: %s it defines (%s) %s also defined by %s in the same folder: CDI runtimes resolve none of them; remove one of the specs",
			plural.Count(len(names[i]), "device name"), quote.List(names[i], shown), isAre(len(names[i])), quote.List(others[i], shown)+such(others[i], shown))})
	}
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// such marks a list of files cut at its bound as examples: counting them
// all would cost the number of files for every name.
func such(files []string, bound int) string {
	if len(files) < bound {
		return ""
	}
	return " (and maybe more)"
}

// Resolve loads the specs of dirs and returns the files that gave no
// devices or conflicting ones (one message each), every loaded spec (per
// vendor in the order read, vendors by name) and every device that
// resolves, by name: what a cache entry holds.
func Resolve(dirs []string) (errs []string, specs []cdientry.Spec, devices []cdientry.Device) {
	s := Load(dirs)
	for _, e := range append(s.Errors, s.Conflicts...) {
		errs = append(errs, e.Error())
	}
	slices.Sort(errs)
	ids := map[*cdi.Spec]int{}
	order := slices.Clone(s.Specs)
	slices.SortStableFunc(order, func(a, b Spec) int { return strings.Compare(a.GetVendor(), b.GetVendor()) })
	for _, sp := range order {
		ids[sp.Spec] = len(specs)
		specs = append(specs, cdientry.Spec{Kind: sp.Kind, Edits: &sp.ContainerEdits})
	}
	for _, name := range slices.Sorted(maps.Keys(s.Devices)) {
		d := s.Devices[name]
		devices = append(devices, cdientry.Device{Name: name, Spec: ids[d.GetSpec()], Edits: &d.ContainerEdits})
	}
	return errs, specs, devices
}

// Entry is the gpuctk-runtime cache entry of dirs as CDI runtimes resolve
// them: what `gpuctk cdi resolve` prints. One over cdientry.MaxSize, which
// gpuctk-runtime would not read, is an error.
func Entry(dirs []string) ([]byte, error) {
	errs, specs, devices := Resolve(dirs)
	data, err := cdientry.Encode(errs, specs, devices)
	if err == nil && len(data) > cdientry.MaxSize {
		return nil, fmt.Errorf("the resolved devices of %s take %d MiB, over the %d MiB gpuctk-runtime reads: remove specs from those folders",
			strings.Join(dirs, ", "), len(data)>>20, cdientry.MaxSize>>20)
	}
	return data, err
}
