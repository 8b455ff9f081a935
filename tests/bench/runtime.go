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
	vendor, specDir            string
	cacheBase                  string // on tmpfs, as the default /run/gpuctk/runtime-cache is on most hosts
	root                       *hookRoot
	n                          int
	id                         string // the last container created
}

// cacheState is the state of gpuctk-runtime's resolved-device cache a run
// finds.
type cacheState int

const (
	warmCache      cacheState = iota // filled by earlier runs
	coldCache                        // emptied before each run: the first create after a spec change gpuctk did not make
	generatedCache                   // what gpuctk cdi generate left, run before each create
)

func (c cacheState) dir(b *runtimeBundle) string {
	return filepath.Join(b.cacheBase, [...]string{"cache-warm", "cache-cold", "cache-generated"}[c])
}

// settings writes a gpuctk config for gpuctk-runtime and returns the
// environment that points it there.
func (b *runtimeBundle) settings(runtime string, cache cacheState) ([]string, error) {
	path := filepath.Join(b.dir, fmt.Sprintf("gpuctk-%s-%d.toml", filepath.Base(runtime), cache))
	data := fmt.Appendf(nil, "[cdi]\nvendor = %q\nspec-dirs = [%q]\n[runtime]\nruntimes = [%q]\nlog-file = %q\ncache-dir = %q\n",
		b.vendor, b.specDir, runtime, filepath.Join(b.dir, "gpuctk-runtime.log"), cache.dir(b))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	return append(os.Environ(), "GPUCTK_CONFIG="+path), nil
}

// newRuntimeBundle prepares the bundle of root for a device of the spec in
// specDir; gpuctk-runtime's caches go under cacheBase. It fails with errNoRuntime when gpuctk-runtime does not edit the
// bundle (a branch where the runtime is not built yet).
func newRuntimeBundle(work, name, runtimeBin, specDir, vendor, device, cacheBase string, root *hookRoot) (*runtimeBundle, error) {
	b := &runtimeBundle{dir: filepath.Join(work, name), runcRoot: filepath.Join(work, name, "runc"), root: root,
		vendor: vendor, specDir: specDir, cacheBase: filepath.Join(cacheBase, name)}
	if err := os.MkdirAll(b.runcRoot, 0o755); err != nil {
		return nil, err
	}
	spec, err := runcSpec(b.dir)
	if err != nil {
		return nil, err
	}
	spec["root"] = map[string]any{"path": root.root, "readonly": false}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/sleep", "60"}
	b.plain, _ = json.Marshal(spec)
	proc["env"] = append(proc["env"].([]any), "NVIDIA_VISIBLE_DEVICES="+device)
	b.requested, _ = json.Marshal(spec)

	// The injected config: what gpuctk-runtime writes, handed to a runc
	// that does nothing.
	env, err := b.settings("/bin/true", coldCache)
	if err != nil {
		return nil, err
	}
	if _, err := b.prepare(b.requested, coldCache)(); err != nil {
		return nil, err
	}
	c := exec.Command(runtimeBin, "--root", b.runcRoot, "create", "--bundle", b.dir, "bench-probe")
	c.Env = env
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

// prepare returns a job's prepare function: the root reset, the cold
// cache emptied, config.json written, and the create command of a fresh
// container id.
func (b *runtimeBundle) prepare(config []byte, cache cacheState, runtime ...string) func() ([][]string, error) {
	return func() ([][]string, error) {
		if _, err := b.root.reset(true)(); err != nil {
			return nil, err
		}
		if err := os.RemoveAll(coldCache.dir(b)); err != nil {
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

// jobs are runc create on the plain and on the injected config,
// gpuctk-runtime create on the requested one with its cache warm and cold,
// and /bin/true, then gpuctk-runtime warm and cold, with /bin/true in
// place of runc.
func (b *runtimeBundle) jobs(runtimeBin string) ([]job, error) {
	warm, err := b.settings("runc", warmCache)
	if err != nil {
		return nil, err
	}
	cold, err := b.settings("runc", coldCache)
	if err != nil {
		return nil, err
	}
	warmTrue, err := b.settings("/bin/true", warmCache)
	if err != nil {
		return nil, err
	}
	coldTrue, err := b.settings("/bin/true", coldCache)
	if err != nil {
		return nil, err
	}
	return []job{
		{name: "runc, no device", prepare: b.prepare(b.plain, warmCache, "runc"), cleanup: b.delete},
		{name: "runc, injected config", prepare: b.prepare(b.injected, warmCache, "runc"), cleanup: b.delete},
		{name: "gpuctk-runtime, warm cache", prepare: b.prepare(b.requested, warmCache, runtimeBin), cleanup: b.delete, env: warm},
		{name: "gpuctk-runtime, cold cache", prepare: b.prepare(b.requested, coldCache, runtimeBin), cleanup: b.delete, env: cold},
		// The runtime's own work without runc's noise: /bin/true as runc.
		{name: "/bin/true as runc", prepare: b.prepare(b.requested, warmCache, "/bin/true")},
		{name: "gpuctk-runtime, /bin/true as runc", prepare: b.prepare(b.requested, warmCache, runtimeBin), env: warmTrue},
		{name: "gpuctk-runtime, /bin/true as runc, cold cache", prepare: b.prepare(b.requested, coldCache, runtimeBin), env: coldTrue},
	}, nil
}

// generatedJobs are runc create on the injected config and gpuctk-runtime
// create right after generate (a command line of `gpuctk cdi generate`
// writing this bundle's spec) rewrote the spec: the first create after a
// spec change gpuctk made. config is generate's configuration file, made
// here: the runtime's spec dir and cache, with extra (the sharing).
func (b *runtimeBundle) generatedJobs(runtimeBin, config, extra string, generate []string) ([]job, error) {
	env, err := b.settings("runc", generatedCache)
	if err != nil {
		return nil, err
	}
	data := fmt.Appendf(nil, "[cdi]\nvendor = %q\nspec-dirs = [%q]\n[runtime]\ncache-dir = %q\n%s", b.vendor, b.specDir, generatedCache.dir(b), extra)
	if err := os.WriteFile(config, data, 0o644); err != nil {
		return nil, err
	}
	// gpuctk-runtime makes its cache folder at its first create; generate
	// fills only one that exists.
	if err := os.MkdirAll(generatedCache.dir(b), 0o700); err != nil {
		return nil, err
	}
	// Both jobs run generate first, so that what it leaves behind (pages
	// to write back, caches cooled by its run) weighs on both creates: the
	// difference is the runtime's alone.
	afterGenerate := func(prepare func() ([][]string, error)) func() ([][]string, error) {
		return func() ([][]string, error) {
			if out, err := exec.Command(generate[0], generate[1:]...).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("gpuctk cdi generate: %v: %s", err, out)
			}
			return prepare()
		}
	}
	return []job{
		{name: "runc, injected config, after gpuctk cdi generate", prepare: afterGenerate(b.prepare(b.injected, warmCache, "runc")), cleanup: b.delete},
		{name: "gpuctk-runtime after gpuctk cdi generate", env: env, cleanup: b.delete, prepare: afterGenerate(b.prepare(b.requested, generatedCache, runtimeBin))},
	}, nil
}

// memoryJob runs gpuctk-runtime create with /bin/true as the real runtime,
// so that the peak memory is its own (Linux keeps a process's peak across
// exec), not runc's; with the cache cold, its worst case: the whole spec
// parsed and the cache written.
func (b *runtimeBundle) memoryJob(runtimeBin string) (job, error) {
	env, err := b.settings("/bin/true", coldCache)
	return job{name: "gpuctk-runtime, /bin/true as runc", prepare: b.prepare(b.requested, coldCache, runtimeBin), env: env, memory: true}, err
}

// runtimeRuns is the number of runs of the runtime rows: four times -runs,
// as a runc create varies by several milliseconds from run to run.
func runtimeRuns(o *options) int { return 4 * o.runs }

// runcSpec writes runc's default config.json into bundle and returns it
// decoded.
func runcSpec(bundle string) (map[string]any, error) {
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec: %v: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("runc spec: %w", err)
	}
	return spec, nil
}
