package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
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

// Conflict is a pair of spec files that define the same device names.
// In one folder CDI readers then resolve none of those names; across
// folders the later folder's file wins and the other's entries are dead.
type Conflict struct {
	Files [2]string `json:"files"`
	Names []string  `json:"names"`
}

func (c Conflict) String() string {
	names := strings.Join(c.Names, ", ")
	if len(c.Names) > 3 {
		names = fmt.Sprintf("%s and %d more", strings.Join(c.Names[:3], ", "), len(c.Names)-3)
	}
	count := "1 device name"
	if len(c.Names) != 1 {
		count = fmt.Sprintf("%d device names", len(c.Names))
	}
	return fmt.Sprintf("%s and %s both define %s (%s)", c.Files[0], c.Files[1], count, names)
}

// List returns the devices of every spec in the spec dirs, sorted by
// qualified name; the pairs of specs that define the same names, each
// pair once; and the errors of specs that could not be loaded.
func List(specDirs []string) ([]Listed, []Conflict, []error, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(specDirs...), cdiapi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		return nil, nil, nil, err
	}
	var out []Listed
	for _, name := range cache.ListDevices() {
		d := cache.GetDevice(name)
		out = append(out, Listed{Name: name, Kind: d.GetSpec().Kind, Spec: d.GetSpec().GetPath(), Capability: IsCapability(d.Name)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })

	// Which files define each name, in the order the library read them.
	defined := map[string][]string{}
	for _, v := range cache.ListVendors() {
		for _, spec := range cache.GetVendorSpecs(v) {
			for _, d := range spec.Devices {
				q := spec.Kind + "=" + d.Name
				defined[q] = append(defined[q], spec.GetPath())
			}
		}
	}
	pairs := map[[2]string][]string{}
	for name, files := range defined {
		for i := range files {
			for j := i + 1; j < len(files); j++ {
				if files[i] != files[j] {
					k := [2]string{files[i], files[j]}
					pairs[k] = append(pairs[k], name)
				}
			}
		}
	}
	var conflicts []Conflict
	for files, names := range pairs {
		sort.Strings(names)
		conflicts = append(conflicts, Conflict{Files: files, Names: names})
	}
	sort.Slice(conflicts, func(i, j int) bool {
		a, b := conflicts[i].Files, conflicts[j].Files
		return a[0] < b[0] || a[0] == b[0] && a[1] < b[1]
	})

	var errs []error
	files := map[string][]error(cache.GetErrors())
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, e := range files[p] {
			// Reported once per pair of files, as a Conflict.
			if strings.HasPrefix(e.Error(), "conflicting device ") {
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", p, e))
		}
	}
	return out, conflicts, errs, nil
}
