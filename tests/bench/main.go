package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/fakehost"
	"github.com/gpuctk/gpuctk/inventory"
)

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "folder holding gpuctk, gpuctk-hook and gpuctk-runtime (make build)")
	flag.StringVar(&o.repo, "repo", ".", "the repository root (for the cdi package's Go benchmarks and the profiles)")
	flag.StringVar(&o.work, "work", ".cache/bench", "where to build the root file systems (the large one hard links the host's libraries: same file system as /usr is best)")
	flag.IntVar(&o.runs, "runs", 25, "timed runs per figure (the median is shown)")
	flag.IntVar(&o.warm, "warm", 3, "untimed runs first")
	flag.StringVar(&o.benchtime, "benchtime", "0.3s", "-benchtime of each Go benchmark run")
	flag.StringVar(&o.out, "out", "bench.txt", "file to write the table to as well")
	flag.StringVar(&o.perf, "perf", "", "file to write the README's performance section to")
	flag.BoolVar(&o.keep, "keep", false, "keep the work folder (roots, bundles, specs) to look into")
	flag.Parse()
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, repo, work, benchtime, out, perf string
	runs, warm                            int
	keep                                  bool
}

func run(o *options) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it runs runc and makes device nodes (sudo make bench)")
	}
	if o.runs < 1 {
		return errors.New("-runs must be at least 1")
	}
	for _, b := range []string{"gpuctk", "gpuctk-hook", "gpuctk-runtime"} {
		if _, err := os.Stat(filepath.Join(o.bin, b)); err != nil {
			return fmt.Errorf("%w (make build)", err)
		}
	}
	bin := func(name string) string { p, _ := filepath.Abs(filepath.Join(o.bin, name)); return p }
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(o.work, "run-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(work)
	}
	if work, err = filepath.Abs(work); err != nil {
		return err
	}
	env := describeMachine(o)
	var r report
	step := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }

	// The spec of a standard driver install: the hook call every container
	// gets, and the libraries the runtime mounts for it.
	step("generating the spec of a standard driver install")
	specJSON, err := exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", largestProfile, "--format", "json",
		"--hook-path", bin("gpuctk-hook"), "--config", writeFile(work, "empty.toml", "")).Output()
	if err != nil {
		return fmt.Errorf("gpuctk cdi generate: %w", exitErr(err))
	}
	var spec cdispecs.Spec
	if err := json.Unmarshal(specJSON, &spec); err != nil {
		return fmt.Errorf("the generated spec: %w", err)
	}
	call, err := specHook(&spec)
	if err != nil {
		return err
	}

	// The hook: merge into the image's cache, and the old way (no cache:
	// ldconfig over the whole image), on a small and a large root.
	step("building the small root (busybox, glibc, ldconfig) and the large one (a copy of %s)", fakehost.LibDir)
	small, err := newHookRoot(work, "small", fakehost.WithGlibc, call)
	if err != nil {
		return err
	}
	large, err := newHookRoot(work, "large", fakehost.WithHostLibs, call)
	if err != nil {
		return err
	}
	nLibs, _ := os.ReadDir(filepath.Join(large.root, fakehost.LibDir))
	for _, tc := range []struct {
		root      *hookRoot
		label     string
		withCache bool
		target    time.Duration
	}{
		{small, "Hook chain, small root: merge into the image's ld.so.cache", true, 5 * time.Millisecond},
		{large, fmt.Sprintf("Hook chain, large root (%d entries in %s): merge", len(nLibs), fakehost.LibDir), true, 5 * time.Millisecond},
		{small, "Old way for comparison, small root: no cache, so ldconfig rebuilds it", false, 0},
		{large, "Old way for comparison, large root: ldconfig over the whole image", false, 0},
	} {
		step("timing: %s", tc.label)
		s, err := interleave(o.runs, o.warm,
			job{name: "no-op", stdin: tc.root.state, cmds: [][]string{{"/bin/cat"}}},
			func() job { j := tc.root.hookJob("gpuctk-hook"); j.prepare = tc.root.reset(tc.withCache); return j }())
		if err != nil {
			return err
		}
		r.timed(tc.label, "no-op process (cat) fed the same state", s[0], s[1], tc.target)
	}
	for _, root := range []*hookRoot{small, large} {
		step("peak memory: gpuctk-hook on the %s root", filepath.Base(root.bundle))
		noop := job{name: "no-op", stdin: root.state, cmds: [][]string{{"/bin/cat"}}, memory: true}
		hook := root.hookJob("gpuctk-hook")
		hook.prepare, hook.memory = root.reset(true), true
		s, err := interleave(o.runs, 0, noop, hook)
		if err != nil {
			return err
		}
		r.memory("Peak memory (max RSS), gpuctk-hook, "+filepath.Base(root.bundle)+" root (merge)", "no-op process (cat)", s[0], s[1], 20<<10)
	}

	// The runtime: runc create+delete, direct and through gpuctk-runtime.
	if err := benchRuntime(o, work, bin, &r, step); err != nil {
		return err
	}

	// gpuctk cdi generate: the functions from the cdi package's Go
	// benchmarks for the curve, the whole command for the largest host.
	cfg := writeFile(work, "sharing.toml", sharingAll)
	var largest job
	var sizes []string
	for _, n := range gpuSizes {
		profile, err := cutProfile(o.repo, work, n)
		if err != nil {
			return err
		}
		out := filepath.Join(work, fmt.Sprintf("spec-%dgpu.yaml", n))
		largest = job{name: fmt.Sprintf("generate %d GPUs", n), cmds: [][]string{{bin("gpuctk"), "cdi", "generate", "--simulate", profile,
			"--config", cfg, "--hook-path", "/usr/bin/gpuctk-hook", "--output", out}}}
		if _, err := largest.run(largest.cmds); err != nil {
			return err
		}
		sizes = append(sizes, out)
	}
	step("running the cdi package's Go benchmarks (%d runs of %s each)", o.runs, o.benchtime)
	gb, err := goBench(o.repo, o.runs, o.benchtime)
	if err != nil {
		return err
	}
	var label string
	for i, n := range gpuSizes {
		devices, kib, err := specStats(sizes[i])
		if err != nil {
			return err
		}
		label = fmt.Sprintf("%d GPU%s, %d MIG devices shared 8 ways (%d device names, %d KiB of YAML)", n, plural(n), 7*n, devices, kib)
		var target time.Duration
		if n == 8 {
			target = 50 * time.Millisecond
		}
		r.function("Generate, "+label, &sample{times: gb[fmt.Sprintf("BenchmarkGenerate/gpus=%d", n)]}, target)
	}
	step("timing: gpuctk cdi generate, %s", label)
	gen, err := interleave(o.runs, o.warm, job{name: "no-op", cmds: [][]string{{"/bin/true"}}}, largest)
	if err != nil {
		return err
	}
	r.command("`gpuctk cdi generate` command, "+label, "no-op process (true)", gen[0], gen[1], 50*time.Millisecond)
	for _, f := range []string{"yaml", "json"} {
		s := &sample{times: gb["BenchmarkResolve/format="+f]}
		r.function(fmt.Sprintf("Resolve one device: load the 8-GPU spec (%s) with the CDI library, inject it", strings.ToUpper(f)), s, 10*time.Millisecond)
	}

	table := r.markdown()
	text := env.header() + "\n" + table + "\n" + notes(o)
	fmt.Print("\n" + text)
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(text), 0o644); err != nil {
			return err
		}
	}
	if o.perf != "" {
		if err := os.WriteFile(o.perf, []byte(perfSection(env, table, o)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// benchRuntime times runc create+delete direct and through gpuctk-runtime,
// for a device of a large spec and of the largest one.
func benchRuntime(o *options, work string, bin func(string) string, r *report, step func(string, ...any)) error {
	p, err := inventory.LoadProfile(largestProfile)
	if err != nil {
		return err
	}
	driverRoot := filepath.Join(work, "driver")
	step("building a fake driver root for %s", largestProfile)
	if err := fakehost.Build(driverRoot, p); err != nil {
		return err
	}
	vendor := fmt.Sprintf("gpuctk-bench-%d.example.com", os.Getpid())
	for _, tc := range []struct {
		label, sharing, device string
	}{
		{"8 x 7 MIG devices", "", "mig-0"},
		{"the same shared 8 ways", sharingAll, "mig-0::0"},
	} {
		specDir := filepath.Join(work, "cdi-"+tc.device)
		if err := os.MkdirAll(specDir, 0o755); err != nil {
			return err
		}
		out := filepath.Join(specDir, "gpuctk.yaml")
		if b, err := exec.Command(bin("gpuctk"), "cdi", "generate", "--simulate", largestProfile, "--driver-root", driverRoot,
			"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--config", writeFile(work, "runtime-"+tc.device+".toml", tc.sharing),
			"--output", out).CombinedOutput(); err != nil {
			return fmt.Errorf("gpuctk cdi generate: %v: %s", err, b)
		}
		devices, kib, err := specStats(out)
		if err != nil {
			return err
		}
		spec, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		call, err := specHook(mustSpec(spec))
		if err != nil {
			return err
		}
		root, err := newHookRoot(work, "runtime-root-"+tc.device, fakehost.WithGlibc, call)
		if err != nil {
			return err
		}
		label := fmt.Sprintf("Runtime, create+delete, device %s of a spec of %s (%d device names, %d KiB)", tc.device, tc.label, devices, kib)
		b, err := newRuntimeBundle(work, "bundle-"+tc.device, bin("gpuctk-runtime"), specDir, vendor, tc.device, root)
		if errors.Is(err, errNoRuntime) {
			step("%v", err)
			r.missing(label, "runc create+delete on the config gpuctk-runtime writes", err.Error(), 5*time.Millisecond)
			continue
		}
		if err != nil {
			return err
		}
		step("timing: %s", label)
		s, err := interleave(o.runs, o.warm, b.jobs(bin("gpuctk-runtime"))...)
		if err != nil {
			return err
		}
		r.timed(label, "runc create+delete on the config gpuctk-runtime writes", s[1], s[2], 5*time.Millisecond)
		r.timed("Whole GPU cost at create+delete: runtime, hook, mounts, device nodes ("+tc.device+")", "runc create+delete, no device", s[0], s[2], 0)
		m, err := interleave(o.runs, 0, job{name: "no-op", cmds: [][]string{{"/bin/true"}}, memory: true}, b.memoryJob(bin("gpuctk-runtime")))
		if err != nil {
			return err
		}
		r.memory("Peak memory (max RSS), gpuctk-runtime create, "+tc.device+" of "+tc.label, "no-op process (true)", m[0], m[1], 20<<10)
	}
	return nil
}

func mustSpec(data []byte) *cdispecs.Spec {
	s, err := cdiapi.ParseSpec(data)
	if err != nil {
		panic(fmt.Sprintf("the generator's own spec: %v", err))
	}
	return s
}

func writeFile(dir, name, content string) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		panic(err)
	}
	return p
}

func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
