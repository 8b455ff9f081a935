// Command ocibundle fills in a bundle's config.json for tests/gpu/smoke.sh
// on a machine with no container engine: it takes the template `runc
// spec` writes and sets the root, the process's arguments and
// environment, and annotations, so the smoke test needs neither python
// nor jq on the GPU machine. It is built static and travels in the pack.
//
//	ocibundle -bundle DIR [-rootfs PATH] [-env K=V]... [-annotation K=V]... -- ARGS...
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ocibundle:", err)
		os.Exit(1)
	}
}

func run(argv []string) error {
	fs := flag.NewFlagSet("ocibundle", flag.ContinueOnError)
	bundle := fs.String("bundle", "", "the bundle folder holding config.json (from `runc spec`)")
	rootfs := fs.String("rootfs", "rootfs", "the container's root, absolute or relative to the bundle")
	var env, annotations list
	fs.Var(&env, "env", "K=V added to the process's environment (repeatable)")
	fs.Var(&annotations, "annotation", "K=V added to the annotations (repeatable)")
	if err := fs.Parse(argv); err != nil {
		return err
	}
	if *bundle == "" || fs.NArg() == 0 {
		return errors.New("usage: ocibundle -bundle DIR [-rootfs PATH] [-env K=V]... [-annotation K=V]... -- ARGS...")
	}
	file := filepath.Join(*bundle, "config.json")
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var c specs.Spec
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if c.Process == nil || c.Root == nil {
		return fmt.Errorf("%s: no process or root: write it with `runc spec`", file)
	}
	c.Root.Path = *rootfs
	c.Root.Readonly = false // the hook writes the linker cache and links
	c.Process.Terminal = false
	c.Process.Args = fs.Args()
	c.Process.Env = append(c.Process.Env, env...)
	for _, a := range annotations {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return fmt.Errorf("-annotation %q: want KEY=VALUE", a)
		}
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[k] = v
	}
	out, err := json.MarshalIndent(&c, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, 0o644)
}
