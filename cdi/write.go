package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/cdiresolve"
	"github.com/gpuctk/gpuctk/internal/plural"
	"github.com/gpuctk/gpuctk/internal/quote"
)

// FormatFor returns the format a spec is written in: the explicit one, or
// the output file's extension, YAML by default; and a warning when the
// output's name is one CDI readers skip (they load only .yaml and .json).
// An output that is a folder (or ends in a slash) is an error.
func FormatFor(format, output string) (string, string, error) {
	switch format {
	case "yaml", "json", "":
	default:
		return "", "", fmt.Errorf("format %q is not known: use yaml or json", format)
	}
	if output != "" {
		if fi, err := os.Stat(output); strings.HasSuffix(output, "/") || err == nil && fi.IsDir() {
			return "", "", fmt.Errorf("%s is a folder: name the spec file in it, such as %s", output, filepath.Join(output, DefaultSpecName))
		}
	}
	var warning string
	ext := filepath.Ext(output)
	if output != "" && ext != ".yaml" && ext != ".json" {
		warning = fmt.Sprintf("%s will not be read by CDI runtimes: they load only .yaml and .json files from their spec dirs (rename it)", output)
	}
	if format == "" {
		format = "yaml"
		if ext == ".json" {
			format = "json"
		}
	}
	return format, warning, nil
}

// Marshal encodes a spec as YAML or JSON.
func Marshal(spec *specs.Spec, format string) ([]byte, error) {
	if format == "json" {
		b, err := json.MarshalIndent(spec, "", "  ")
		return append(b, '\n'), err
	}
	if err := checkYAMLFields(spec); err != nil {
		return nil, err
	}
	w := yamlWriter{b: make([]byte, 0, 64<<10)}
	out := w.spec(spec)
	return out, w.err
}

// WriteSpec writes data to path atomically with mode 0644, making its
// folder if needed: readers see the old spec or the new, never a torn one.
// Errors name the destination and say when root is needed.
func WriteSpec(path string, data []byte) error {
	_, err := writeSpec(path, func() (string, error) { return "", atomicfile.WriteFile(path, data, 0o644) })
	return err
}

// ReclaimSpec is WriteSpec for a writer whose path is its own (the device
// plugin's): whatever else is there, a FIFO, a link, a folder, is replaced
// (atomicfile.Reclaim), and named in was.
func ReclaimSpec(path string, data []byte) (was string, err error) {
	return writeSpec(path, func() (string, error) { return atomicfile.Reclaim(path, data, 0o644) })
}

func writeSpec(path string, write func() (string, error)) (string, error) {
	was, err := "", os.MkdirAll(filepath.Dir(path), 0o755)
	if err == nil {
		was, err = write()
	}
	if err == nil {
		return was, nil
	}
	// The temporary file's name means nothing to the user: name the
	// destination and keep the system's reason.
	var errno syscall.Errno
	if errors.As(err, &errno) {
		err = errno
	}
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		return "", fmt.Errorf("write spec %s: %w: writing there needs root (run with sudo) or choose another --output", path, err)
	}
	return "", fmt.Errorf("write spec %s: %w", path, err)
}

// Listed is a device found in the spec dirs.
type Listed struct {
	Name string `json:"name" yaml:"name"`
	Kind string `json:"kind" yaml:"kind"`
	Spec string `json:"spec" yaml:"spec"`
	// Capability marks a capability device (capability-graphics, ...):
	// driver files to ask for beside a GPU, not a device of its own.
	Capability bool `json:"capability,omitempty" yaml:"capability,omitempty"`
}

// Conflict is a set of spec files that define the same device names. In
// one folder CDI readers then resolve none of those names; across folders
// the latest folder's file wins and the others' entries are dead.
type Conflict struct {
	Files []string `json:"files"` // in the order CDI readers read them
	Names []string `json:"names"`
}

// conflictShown bounds the files and names a conflict's line quotes.
const conflictShown = 3

func (c Conflict) String() string {
	verb := "both define"
	if len(c.Files) > 2 {
		verb = "all define"
	}
	files := c.Files[0] + " and " + c.Files[len(c.Files)-1]
	if len(c.Files) != 2 {
		files = quote.List(c.Files, conflictShown)
	}
	return fmt.Sprintf("%s %s %s (%s)", files, verb, plural.Count(len(c.Names), "device name"), quote.List(c.Names, conflictShown))
}

// List returns the devices of every spec in the spec dirs, sorted by
// qualified name; the sets of specs that define the same names, each set
// once with every name its files all define; and the errors of specs
// that could not be loaded. Specs are read through the gate for files
// others control (see internal/cdiresolve), and the work is linear in
// the names and files.
func List(specDirs []string) ([]Listed, []Conflict, []error, error) {
	set := cdiresolve.Load(specDirs)
	var out []Listed
	for _, name := range slices.Sorted(maps.Keys(set.Devices)) {
		d := set.Devices[name]
		out = append(out, Listed{Name: name, Kind: d.GetSpec().Kind, Spec: set.Path(d.GetSpec()), Capability: IsCapability(d.Name)})
	}
	// Conflicts are reported once per set of files, below.
	var errs []error
	for _, e := range set.Errors {
		errs = append(errs, e)
	}
	return out, conflictsOf(set), errs, nil
}

// conflictsOf groups the names that several specs define by the list of
// those specs, in time linear in the definitions: the key of a name is
// as long as its list of specs.
func conflictsOf(set *cdiresolve.Set) []Conflict {
	group := map[string]*Conflict{}
	var conflicts []*Conflict
	for _, name := range slices.Sorted(maps.Keys(set.Defined)) {
		defs := set.Defined[name]
		if len(defs) < 2 {
			continue
		}
		var key strings.Builder
		for _, i := range defs {
			key.WriteString(strconv.Itoa(i) + ",")
		}
		c := group[key.String()]
		if c == nil {
			c = &Conflict{}
			for _, i := range defs {
				c.Files = append(c.Files, set.Specs[i].Path)
			}
			group[key.String()] = c
			conflicts = append(conflicts, c)
		}
		c.Names = append(c.Names, name)
	}
	sorted := make([]Conflict, len(conflicts))
	for i, c := range conflicts {
		sorted[i] = *c
	}
	slices.SortFunc(sorted, func(a, b Conflict) int { return slices.Compare(a.Files, b.Files) })
	return sorted
}
