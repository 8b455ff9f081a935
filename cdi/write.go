package cdi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
)

// FormatFor returns the format a spec is written in: the explicit one, or
// the output file's extension, YAML by default.
func FormatFor(format, output string) (string, error) {
	switch format {
	case "yaml", "json":
		return format, nil
	case "":
	default:
		return "", fmt.Errorf("format %q is not known: use yaml or json", format)
	}
	switch ext := filepath.Ext(output); ext {
	case ".json":
		return "json", nil
	case ".yaml", ".yml", "":
		return "yaml", nil
	default:
		return "", fmt.Errorf("output %s: extension %q is neither .yaml nor .json (the CDI spec dirs load only those): rename it or pass --format", output, ext)
	}
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
func WriteSpec(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("spec folder: %w", err)
	}
	return atomicfile.WriteFile(path, data, 0o644)
}

// Listed is a device found in the spec dirs.
type Listed struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Spec string `json:"spec"`
}

// List returns the devices of every spec in the spec dirs, sorted by
// qualified name, and the errors of specs that could not be loaded.
func List(specDirs []string) ([]Listed, []error, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(specDirs...), cdiapi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		return nil, nil, err
	}
	var out []Listed
	for _, name := range cache.ListDevices() {
		d := cache.GetDevice(name)
		out = append(out, Listed{Name: name, Kind: d.GetSpec().Kind, Spec: d.GetSpec().GetPath()})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	var errs []error
	files := map[string][]error(cache.GetErrors())
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, e := range files[p] {
			errs = append(errs, fmt.Errorf("%s: %w", p, e))
		}
	}
	return out, errs, nil
}
