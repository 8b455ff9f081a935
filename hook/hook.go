package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// subcommands maps a subcommand to its implementation. Each gets the
// arguments after its name and the hook's environment.
var subcommands = map[string]func(env *Env, args []string) error{
	"setup": setup,
}

// Env is what a subcommand runs with.
type Env struct {
	// State is the OCI state read from stdin, read on first use.
	Stdin  io.Reader
	Stderr io.Writer
	state  *state
}

// Main runs the hook with args (without the program name) and returns the
// process exit code.
func Main(args []string, stdin io.Reader, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "gpuctk-hook: no subcommand: this program is run by container runtimes from a CDI spec")
		return 2
	}
	if args[0] == "--version" || args[0] == "version" {
		fmt.Fprintln(stderr, "gpuctk-hook", Version)
		return 0
	}
	run, ok := subcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gpuctk-hook: warning: unknown subcommand %q ignored (spec from a newer gpuctk?)\n", args[0])
		return 0
	}
	env := &Env{Stdin: stdin, Stderr: stderr}
	if err := run(env, args[1:]); err != nil {
		fmt.Fprintf(stderr, "gpuctk-hook %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// Version is set by cmd/gpuctk-hook.
var Version = "dev"

type state struct {
	Bundle string `json:"bundle"`
	Pid    int    `json:"pid"`
	ID     string `json:"id"`
}

// ContainerRoot returns the host path of the container's root file
// system: the bundle's config.json root.path, relative to the bundle.
func (e *Env) ContainerRoot() (string, error) {
	if e.state == nil {
		var s state
		if err := json.NewDecoder(io.LimitReader(e.Stdin, 1<<20)).Decode(&s); err != nil {
			return "", fmt.Errorf("reading the OCI state on stdin: %w", err)
		}
		if s.Bundle == "" {
			return "", errors.New("the OCI state on stdin has no bundle")
		}
		e.state = &s
	}
	f, err := os.Open(filepath.Join(e.state.Bundle, "config.json"))
	if err != nil {
		return "", fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	var cfg struct {
		Root struct {
			Path string `json:"path"`
		} `json:"root"`
	}
	if err := json.NewDecoder(io.LimitReader(f, 64<<20)).Decode(&cfg); err != nil {
		return "", fmt.Errorf("bundle %s/config.json: %w", e.state.Bundle, err)
	}
	if cfg.Root.Path == "" {
		return "", fmt.Errorf("bundle %s/config.json has no root.path", e.state.Bundle)
	}
	if filepath.IsAbs(cfg.Root.Path) {
		return cfg.Root.Path, nil
	}
	return filepath.Join(e.state.Bundle, cfg.Root.Path), nil
}

// flags parses "--name value" pairs. Names in known are collected; an
// unknown one is warned about and skipped with its value, so newer specs
// keep working with this hook.
func flags(e *Env, args []string, known ...string) (map[string][]string, error) {
	out := map[string][]string{}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "--") {
			return nil, fmt.Errorf("unexpected argument %q", args[i])
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			value = args[i]
		}
		ok := false
		for _, k := range known {
			ok = ok || k == name
		}
		if !ok {
			fmt.Fprintf(e.Stderr, "gpuctk-hook: warning: unknown flag --%s ignored\n", name)
			continue
		}
		out[name] = append(out[name], value)
	}
	return out, nil
}
