package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// runtimeBundle is a runc bundle of a busybox container on a glibc root,
// in three versions of its config.json: asking for no device, asking for
// one through NVIDIA_VISIBLE_DEVICES (what gpuctk-runtime is given), and
// as gpuctk-runtime leaves it after injecting the device (what runc is
// then given).
type runtimeBundle struct {
	dir, runcRoot              string
	plain, requested, injected []byte
	config                     string // GPUCTK_CONFIG for gpuctk-runtime
	configTrue                 string // the same with /bin/true for runc
	root                       *hookRoot
	n                          int
	id                         string // the last container created
}

// newRuntimeBundle prepares the bundle of root for a device of the spec in
// specDir. It fails with errNoRuntime when gpuctk-runtime does not edit the
// bundle (a branch where the runtime is not built yet).
func newRuntimeBundle(work, name, runtimeBin, specDir, vendor, device string, root *hookRoot) (*runtimeBundle, error) {
	b := &runtimeBundle{dir: filepath.Join(work, name), runcRoot: filepath.Join(work, name, "runc"), root: root}
	if err := os.MkdirAll(b.runcRoot, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("runc", "spec", "--bundle", b.dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec: %v: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(b.dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, err
	}
	spec["root"] = map[string]any{"path": root.root, "readonly": false}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/sleep", "60"}
	b.plain, _ = json.Marshal(spec)
	proc["env"] = append(proc["env"].([]any), "NVIDIA_VISIBLE_DEVICES="+device)
	b.requested, _ = json.Marshal(spec)

	b.config, b.configTrue = filepath.Join(b.dir, "gpuctk.toml"), filepath.Join(b.dir, "gpuctk-true.toml")
	for path, runtime := range map[string]string{b.config: "runc", b.configTrue: "/bin/true"} {
		settings := fmt.Appendf(nil, "[cdi]\nvendor = %q\nspec-dirs = [%q]\n[runtime]\nruntimes = [%q]\nlog-file = %q\n",
			vendor, specDir, runtime, filepath.Join(b.dir, "gpuctk-runtime.log"))
		if err := os.WriteFile(path, settings, 0o644); err != nil {
			return nil, err
		}
	}
	// The injected config: what gpuctk-runtime writes, handed to a runc
	// that does nothing.
	if _, err := b.prepare(b.requested)(); err != nil {
		return nil, err
	}
	c := exec.Command(runtimeBin, "--root", b.runcRoot, "create", "--bundle", b.dir, "bench-probe")
	c.Env = append(os.Environ(), "GPUCTK_CONFIG="+b.configTrue)
	if out, err := c.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: gpuctk-runtime create: %v: %s", errNoRuntime, err, out)
	}
	if b.injected, err = os.ReadFile(filepath.Join(b.dir, "config.json")); err != nil {
		return nil, err
	}
	if bytes.Equal(b.injected, b.requested) {
		return nil, fmt.Errorf("%w: gpuctk-runtime left the bundle as it was", errNoRuntime)
	}
	return b, nil
}

var errNoRuntime = fmt.Errorf("gpuctk-runtime does not inject devices on this branch")

// prepare returns a job's prepare function: the root reset, config.json
// written, and the create command of a fresh container id.
func (b *runtimeBundle) prepare(config []byte, runtime ...string) func() ([][]string, error) {
	return func() ([][]string, error) {
		if _, err := b.root.reset(true)(); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(b.dir, "config.json"), config, 0o644); err != nil {
			return nil, err
		}
		if len(runtime) == 0 {
			return nil, nil
		}
		b.n++
		b.id = fmt.Sprintf("gpuctk-bench-%d-%d", os.Getpid(), b.n)
		return [][]string{append(append([]string{}, runtime...), "--root", b.runcRoot, "create", "--bundle", b.dir, b.id)}, nil
	}
}

// delete removes the container the last run created. Not timed: runc
// polls every 100 ms for a killed container to stop, which would bury the
// milliseconds measured here.
func (b *runtimeBundle) delete() error {
	if out, err := exec.Command("runc", "--root", b.runcRoot, "delete", "--force", b.id).CombinedOutput(); err != nil {
		return fmt.Errorf("runc delete %s: %v: %s", b.id, err, out)
	}
	return nil
}

// jobs are runc on the plain and the injected config, and gpuctk-runtime
// on the requested one: create, each.
func (b *runtimeBundle) jobs(runtimeBin string) []job {
	env := append(os.Environ(), "GPUCTK_CONFIG="+b.config)
	return []job{
		{name: "runc, no device", prepare: b.prepare(b.plain, "runc"), cleanup: b.delete, env: env},
		{name: "runc, injected config", prepare: b.prepare(b.injected, "runc"), cleanup: b.delete, env: env},
		{name: "gpuctk-runtime", prepare: b.prepare(b.requested, runtimeBin), cleanup: b.delete, env: env},
	}
}

// memoryJob runs gpuctk-runtime create with /bin/true as the real runtime:
// its peak memory is then its own (Linux keeps a process's peak across
// exec), not runc's.
func (b *runtimeBundle) memoryJob(runtimeBin string) job {
	return job{name: "gpuctk-runtime, /bin/true as runc", prepare: b.prepare(b.requested, runtimeBin), env: append(os.Environ(), "GPUCTK_CONFIG="+b.configTrue), memory: true}
}
