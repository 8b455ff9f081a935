package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpuctk/gpuctk/internal/tomlerr"
)

// crioNeeds are the keys of a runtime that CRI-O needs to run containers
// the way its default runtime does.
var crioNeeds = []string{"monitor_path", "runtime_root"}

// crio writes a drop-in with the runtime: a copy of the effective default
// runtime with gpuctk-runtime as its path. CRI-O reads every drop-in of
// its folder: the main config needs no edit. missing names the keys the
// default runtime has nowhere, which the user must add to the drop-in.
func crio(o Options, uninstall bool) (changes []Change, missing []string, err error) {
	old, err := readFile(o.DropIn)
	if err != nil {
		return nil, nil, err
	}
	if uninstall {
		return change(o.DropIn, old, nil, false), nil, nil
	}
	merged, err := crioEffective(o)
	if err != nil {
		return nil, nil, err
	}
	def, _ := table(merged, "crio", "runtime")["default_runtime"].(string)
	if def == "" || def == o.Name {
		def = "runc"
	}
	rt := deepCopy(table(merged, "crio", "runtime", "runtimes", def))
	for _, k := range crioNeeds {
		if v, _ := rt[k].(string); v == "" {
			missing = append(missing, k)
		}
	}
	rt["runtime_path"] = o.Path
	rt["runtime_type"] = "oci"

	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by `gpuctk runtime configure --runtime crio`: containers of the runtime %q\n", o.Name)
	fmt.Fprintf(&b, "# get the GPUs they ask for through gpuctk-runtime. `--uninstall` removes this file.\n")
	fmt.Fprintf(&b, "# The rest is a copy of the default runtime %q as CRI-O reads it (main config and drop-ins).\n", def)
	if o.SetAsDefault {
		b.WriteString("\n")
		if err := writeTable(&b, []string{"crio", "runtime"}, map[string]any{"default_runtime": o.Name}, ""); err != nil {
			return nil, nil, err
		}
	}
	b.WriteString("\n")
	if err := writeTable(&b, []string{"crio", "runtime", "runtimes", o.Name}, rt, ""); err != nil {
		return nil, nil, err
	}
	return change(o.DropIn, old, b.Bytes(), false), missing, nil
}

// crioEffective is the configuration CRI-O reads, less gpuctk's drop-in:
// the main config, then each drop-in of the drop-in's folder in lexical
// order, a later value replacing an earlier one key by key.
func crioEffective(o Options) (map[string]any, error) {
	files := []string{o.Config}
	entries, err := os.ReadDir(filepath.Dir(o.DropIn))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("read CRI-O drop-ins %s: %w", filepath.Dir(o.DropIn), err)
	}
	var names []string
	for _, e := range entries {
		// CRI-O reads the regular files of the folder, whatever their
		// names; our backup files are not configs.
		if p := filepath.Join(filepath.Dir(o.DropIn), e.Name()); e.Type().IsRegular() && p != o.DropIn && !strings.HasSuffix(p, BackupSuffix) {
			names = append(names, p)
		}
	}
	slices.Sort(names)
	merged := map[string]any{}
	for _, f := range append(files, names...) {
		data, err := readFile(f)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := toml.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("CRI-O config %s: %w", f, tomlerr.Line(err))
		}
		mergeInto(merged, m)
	}
	return merged, nil
}

// mergeInto merges src into dst: tables key by key, other values replaced.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		if t, ok := v.(map[string]any); ok {
			if d, ok := dst[k].(map[string]any); ok {
				mergeInto(d, t)
				continue
			}
			v = deepCopy(t)
		}
		dst[k] = v
	}
}
