package engine

import (
	"bytes"
	"fmt"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpuctk/gpuctk/internal/tomlerr"
)

// crio writes a drop-in with the runtime, a copy of the runc runtime of the
// main config with gpuctk-runtime as its path. CRI-O reads every drop-in of
// its folder: the main config needs no edit.
func crio(o Options, uninstall bool) ([]Change, error) {
	old, err := readFile(o.DropIn)
	if err != nil {
		return nil, err
	}
	if uninstall {
		return change(o.DropIn, old, nil, false), nil
	}
	mainData, err := readFile(o.Config)
	if err != nil {
		return nil, err
	}
	var main map[string]any
	if err := toml.Unmarshal(mainData, &main); err != nil {
		return nil, fmt.Errorf("CRI-O config %s: %w", o.Config, tomlerr.Line(err))
	}
	rt := deepCopy(table(main, "crio", "runtime", "runtimes", "runc"))
	rt["runtime_path"] = o.Path
	rt["runtime_type"] = "oci"

	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by `gpuctk runtime configure --runtime crio`: containers of the runtime %q\n", o.Name)
	fmt.Fprintf(&b, "# get the GPUs they ask for through gpuctk-runtime. `--uninstall` removes this file.\n")
	if o.SetAsDefault {
		b.WriteString("\n")
		if err := writeTable(&b, []string{"crio", "runtime"}, map[string]any{"default_runtime": o.Name}, ""); err != nil {
			return nil, err
		}
	}
	b.WriteString("\n")
	if err := writeTable(&b, []string{"crio", "runtime", "runtimes", o.Name}, rt, ""); err != nil {
		return nil, err
	}
	return change(o.DropIn, old, b.Bytes(), false), nil
}
