package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/ldcache"
	"github.com/gpuctk/gpuctk/internal/pagecache"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
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
	flag.StringVar(&o.only, "only", "hook,runtime,driverfs,generate,plugin", "sections to run, in this order")
	flag.StringVar(&o.tools, "tools", ".cache/tools", "folder holding kubelet, containerd, ctr and containerd-shim-runc-v2 (make deps), for the plugin section")
	flag.IntVar(&o.pods, "pods", 30, "pairs of pods (plain, one GPU) timed in the plugin section")
	flag.BoolVar(&o.journal, "journal", true, "in the plugin section, time the pod pairs again with the kubelet's and containerd's folders on a journaled ext4 made in a file (mkfs.ext4, a loop mount)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work folder (roots, bundles, specs) and the tmpfs one under /dev/shm (gpuctk-bench-*) to look into; the hook roots are left as a run finds them")
	flag.Parse()
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, repo, work, benchtime, out, perf, only, tools string
	runs, warm, pods                                   int
	keep, journal                                      bool
}

func run(o *options) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it runs runc and makes device nodes (sudo make bench)")
	}
	if o.runs < 1 {
		return errors.New("-runs must be at least 1")
	}
	if o.pods < 1 {
		return errors.New("-pods must be at least 1")
	}
	for _, b := range []string{"gpuctk", "gpuctk-hook", "gpuctk-runtime"} {
		if _, err := os.Stat(filepath.Join(o.bin, b)); err != nil {
			return fmt.Errorf("%w (make build)", err)
		}
	}
	// The hook's and the runtime's files in the page cache as the
	// refresh unit leaves them at boot (package pagecache): how they came
	// there moves a hook run by 0.3 ms or more, see the hook rows.
	for _, b := range []string{"gpuctk-hook", "gpuctk-runtime"} {
		if err := pagecache.Warm(filepath.Join(o.bin, b)); err != nil {
			return err
		}
	}
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
	b := &bench{o: o, work: work, r: &report{}}
	sections := map[string]func() error{"hook": b.hook, "runtime": b.runtime, "driverfs": b.driverFS, "generate": b.generate, "plugin": b.plugin}
	for _, name := range strings.Split(o.only, ",") {
		f, ok := sections[name]
		if !ok {
			return fmt.Errorf("-only %s: no section %q (hook, runtime, driverfs, generate, plugin)", o.only, name)
		}
		if err := f(); err != nil {
			return err
		}
	}
	r := b.r
	if b.linkCost > 0 {
		env.linkCost = b.linkCost.Round(time.Microsecond).String()
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

// bench is one run of the harness: where it works and what it found.
type bench struct {
	o        *options
	work     string
	r        *report
	linkCost time.Duration // what creating a link took before the hook rows
}

func (b *bench) bin(name string) string {
	p, _ := filepath.Abs(filepath.Join(b.o.bin, name))
	return p
}

func (b *bench) step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// hook times the hook's merge on a small and a large root, and the old way
// (no cache: ldconfig over the whole image), and its peak memory.
func (b *bench) hook() error {
	// The spec of a full driver install (fake files, the driver's names):
	// the hook call every container gets, and the files the runtime
	// mounts for it, in the driver folder as by default.
	b.step("generating the spec of a full driver install")
	profile, err := inventory.LoadProfile(largestProfile)
	if err != nil {
		return err
	}
	driverRoot := filepath.Join(b.work, "driver-hook")
	if err := fakehost.BuildFull(driverRoot, profile); err != nil {
		return fmt.Errorf("fake driver root: %w", err)
	}
	hookCallOf := func(flags ...string) (*hookCall, error) {
		specJSON, err := exec.Command(b.bin("gpuctk"), append([]string{"cdi", "generate", "--simulate", largestProfile, "--driver-root", driverRoot, "--format", "json",
			"--hook-path", b.bin("gpuctk-hook"), "--config", writeFile(b.work, "empty.toml", "")}, flags...)...).Output()
		if err != nil {
			return nil, fmt.Errorf("gpuctk cdi generate: %w", exitErr(err))
		}
		var spec cdispecs.Spec
		if err := json.Unmarshal(specJSON, &spec); err != nil {
			return nil, fmt.Errorf("the generated spec: %w", err)
		}
		return specHook(&spec)
	}
	call, err := hookCallOf()
	if err != nil {
		return err
	}
	// For comparison: each driver file mounted (runc makes its mount
	// point), the hook making only the SONAME links.
	callFiles, err := hookCallOf("--driver-folder=false")
	if err != nil {
		return err
	}

	// The hook: merge into the image's cache, and the old way (no cache:
	// ldconfig over the whole image), on a small and a large root. On
	// these machines' root ext4 (no journal, on a shared virtual disk),
	// creating a link takes 15 µs in one run and over 600 µs in another,
	// for a plain symlink(2) loop as much as for the hook; linkCost
	// measures it just before the rows. The same roots on tmpfs show the
	// hook's own cost: the merge reads only the cache, so the large root
	// there is the small one with the large root's cache.
	b.step("building the small root (busybox, glibc, ldconfig) and the large one (a copy of %s)", fakehost.LibDir)
	small, err := newHookRoot(b.work, "small", fakehost.WithGlibc, call)
	if err != nil {
		return err
	}
	large, err := newHookRoot(b.work, "large", fakehost.WithHostLibs, call)
	if err != nil {
		return err
	}
	shm, err := os.MkdirTemp("/dev/shm", "gpuctk-bench-")
	if err != nil {
		return err
	}
	if !b.o.keep {
		defer os.RemoveAll(shm)
	}
	smallTmpfs, err := newHookRoot(shm, "small", fakehost.WithGlibc, call)
	if err != nil {
		return err
	}
	largeTmpfs, err := newHookRoot(shm, "large-cache", fakehost.WithGlibc, call)
	if err != nil {
		return err
	}
	largeTmpfs.cache = large.cache
	smallFiles, err := newHookRoot(b.work, "small-files", fakehost.WithGlibc, callFiles)
	if err != nil {
		return err
	}
	smallFilesTmpfs, err := newHookRoot(shm, "small-files", fakehost.WithGlibc, callFiles)
	if err != nil {
		return err
	}
	files, _ := os.ReadDir(filepath.Join(large.root, fakehost.LibDir))
	cache, err := ldcache.Parse(large.cache)
	if err != nil {
		return fmt.Errorf("the large root's cache: %w", err)
	}
	largeLabel := fmt.Sprintf("large root (%d files in %s, %d cache entries)", len(files), fakehost.LibDir, len(cache.Entries))
	// The roots' copies are written back first, not during the rows: on
	// this disk that writeback made a link cost 60 times more.
	unix.Sync()
	// What a link costs on this file system now: the ext4 rows move with it.
	if b.linkCost, err = linkCost([]string{filepath.Join(small.root, fakehost.LibDir), filepath.Join(large.root, fakehost.LibDir)}, 20); err != nil {
		return err
	}
	// A copy of the hook brought into the page cache by its first exec,
	// as on a host where a container starts before anything reads it
	// (no refresh unit at boot): the first exec's page faults cache the
	// file in small pieces, which every later run maps more slowly.
	execLoaded := filepath.Join(b.work, "exec-loaded", "gpuctk-hook")
	if err := copyFile(b.bin("gpuctk-hook"), execLoaded); err != nil {
		return err
	}
	if err := pagecache.Drop(execLoaded); err != nil {
		return err
	}
	if err := exec.Command(execLoaded, "version").Run(); err != nil {
		return fmt.Errorf("%s version: %w", execLoaded, err)
	}
	// Go's start and exit alone, built as the hook is: what the hook's
	// own cost stands on in the same run, as the machine is then.
	emptyGo := filepath.Join(b.work, "emptygo", "emptygo")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", emptyGo, "./tests/bench/emptygo")
	build.Dir, build.Env = b.o.repo, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./tests/bench/emptygo: %v: %s", err, out)
	}
	// Written again, as the hook's file is read through first: the
	// linker writes through a mapping, which starts slower.
	if err := copyFile(emptyGo, emptyGo+".copy"); err != nil {
		return err
	}
	emptyGo += ".copy"
	for _, tc := range []struct {
		root      *hookRoot
		label     string
		withCache bool
		target    time.Duration
		hook      string // the hook's file: the spec's unless set
	}{
		{small, "Hook chain, small root: merge into the image's ld.so.cache", true, 2 * time.Millisecond, ""},
		{large, "Hook chain, " + largeLabel + ": merge", true, 2 * time.Millisecond, ""},
		{smallTmpfs, "Hook chain, small root on tmpfs (the hook's own cost, without this ext4's)", true, time.Millisecond, ""},
		{largeTmpfs, "Hook chain, large root's cache on tmpfs", true, time.Millisecond, ""},
		{smallFiles, fmt.Sprintf("For comparison, small root, driver-folder = false: runc mounts each driver file, the hook links none of them (%d links fewer)", len(call.links)-len(callFiles.links)), true, 0, ""},
		{smallFilesTmpfs, "For comparison, the same on tmpfs", true, 0, ""},
		{smallTmpfs, "For comparison, small root on tmpfs, the hook's file brought into the page cache by its first exec, not read through first", true, 0, execLoaded},
		{smallTmpfs, "For comparison, the floor under the tmpfs rows: an empty static Go program run as the hook (its environment and arguments), Go's start and exit alone", true, 0, emptyGo},
		{small, "Old way for comparison, small root: no cache, so ldconfig rebuilds it", false, 0, ""},
		{large, "Old way for comparison, large root: ldconfig over the whole image", false, 0, ""},
	} {
		b.step("timing: %s", tc.label)
		s, err := interleave(b.o.runs, b.o.warm,
			job{name: "no-op", stdin: tc.root.state, env: tc.root.call.env, cmds: [][]string{{"/bin/cat"}}},
			func() job {
				j := tc.root.hookJob("gpuctk-hook")
				if tc.hook != "" {
					j.cmds[0][0] = tc.hook
				}
				j.prepare = tc.root.reset(tc.withCache)
				return j
			}())
		if err != nil {
			return err
		}
		b.r.timed(tc.label, "no-op process (cat) fed the same state", s[0], s[1], tc.target)
	}
	for _, root := range []*hookRoot{small, large} {
		b.step("peak memory: gpuctk-hook on the %s root", filepath.Base(root.bundle))
		noop := job{name: "no-op", stdin: root.state, env: root.call.env, cmds: [][]string{{"/bin/cat"}}, memory: true}
		hook := root.hookJob("gpuctk-hook")
		hook.prepare, hook.memory = root.reset(true), true
		s, err := interleave(b.o.runs, 0, noop, hook)
		if err != nil {
			return err
		}
		b.r.memory("Peak memory (max RSS), gpuctk-hook, "+filepath.Base(root.bundle)+" root (merge)", "no-op process (cat)", s[0], s[1], 4<<10)
	}
	if b.o.keep {
		// Kept roots as a run finds them (no links of the hook's, the
		// image's own cache), to time the hook on by hand.
		for _, root := range []*hookRoot{small, large, smallTmpfs, largeTmpfs, smallFiles, smallFilesTmpfs} {
			if _, err := root.reset(true)(); err != nil {
				return err
			}
		}
	}
	return nil
}

// generate takes the generate curve from the cdi package's Go benchmarks,
// times the whole command for the largest host, and takes the resolve
// figure.
func (b *bench) generate() error {
	// gpuctk cdi generate: the functions from the cdi package's Go
	// benchmarks for the curve, the whole command for the largest host.
	cfg := writeFile(b.work, "sharing.toml", sharingAll)
	var largest job
	var sizes []string
	for _, n := range gpuSizes {
		profile, err := cutProfile(b.o.repo, b.work, n)
		if err != nil {
			return err
		}
		out := filepath.Join(b.work, fmt.Sprintf("spec-%dgpu.yaml", n))
		largest = job{name: fmt.Sprintf("generate %d GPUs", n), cmds: [][]string{{b.bin("gpuctk"), "cdi", "generate", "--simulate", profile,
			"--config", cfg, "--hook-path", "/usr/bin/gpuctk-hook", "--output", out}}}
		if _, err := largest.run(largest.cmds); err != nil {
			return err
		}
		sizes = append(sizes, out)
	}
	b.step("running the cdi package's Go benchmarks (%d runs of %s each)", b.o.runs, b.o.benchtime)
	gb, err := goBench(b.o.repo, b.o.runs, b.o.benchtime)
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
		b.r.function("Generate, "+label, &sample{times: gb[fmt.Sprintf("BenchmarkGenerate/gpus=%d", n)]}, target)
	}
	b.step("timing: gpuctk cdi generate, %s", label)
	gen, err := interleave(b.o.runs, b.o.warm, job{name: "no-op", cmds: [][]string{{"/bin/true"}}}, largest)
	if err != nil {
		return err
	}
	b.r.command("`gpuctk cdi generate` command, "+label, "no-op process (true)", gen[0], gen[1], 50*time.Millisecond)
	// The target is the spec as gpuctk writes it by default (YAML); JSON,
	// which the CDI library also parses with go-yaml, is for comparison.
	b.r.function("Resolve one device: load the 8-GPU spec (YAML, the default) with the CDI library, inject it",
		&sample{times: gb["BenchmarkResolve/format=yaml"]}, 10*time.Millisecond)
	b.r.function("Resolve one device, the same spec written with --format json, for comparison",
		&sample{times: gb["BenchmarkResolve/format=json"]}, 0)

	return nil
}

// runtime times runc create+delete direct and through gpuctk-runtime,
// for a device of a large spec and of the largest one.
func (b *bench) runtime() error {
	// The host has no driver: the spec is a standard install's, with its
	// mounts' host paths moved into a folder holding stand-ins (ELF
	// libraries with their SONAMEs, empty files). The devices are left as
	// generated; runc makes their nodes from major and minor.
	fake := filepath.Join(b.work, "driver")
	// containerd and CRI-O keep bundles and runc's state under /run, and
	// gpuctk-runtime's cache lives there: tmpfs on systemd hosts (not on
	// these machines, whose /run is on the root ext4).
	cacheBase, err := os.MkdirTemp("/dev/shm", "gpuctk-bench-")
	if err != nil {
		return err
	}
	if !b.o.keep {
		defer os.RemoveAll(cacheBase)
	}
	vendor := fmt.Sprintf("gpuctk-bench-%d.example.com", os.Getpid())
	for _, tc := range []struct {
		label, sharing, device string
		target                 time.Duration // of the warm create against runc's
	}{
		{"8 x 7 MIG devices", "", "mig-0", 2 * time.Millisecond},
		{"the same shared 8 ways", sharingAll, "mig-0::0", 3 * time.Millisecond},
	} {
		specDir := filepath.Join(b.work, "cdi-"+tc.device)
		if err := os.MkdirAll(specDir, 0o755); err != nil {
			return err
		}
		out := filepath.Join(specDir, "gpuctk.yaml")
		if msg, err := exec.Command(b.bin("gpuctk"), "cdi", "generate", "--simulate", largestProfile,
			"--vendor", vendor, "--hook-path", b.bin("gpuctk-hook"), "--config", writeFile(b.work, "runtime-"+tc.device+".toml", tc.sharing),
			"--output", out).CombinedOutput(); err != nil {
			return fmt.Errorf("gpuctk cdi generate: %v: %s", err, msg)
		}
		call, err := standIns(out, fake)
		if err != nil {
			return err
		}
		devices, kib, err := specStats(out)
		if err != nil {
			return err
		}
		// The container's root is on tmpfs too: gpuctk-runtime never
		// touches it, and the hook inside runc create would otherwise
		// bring this disk's noise (see the hook rows) into both runs.
		root, err := newHookRoot(cacheBase, "runtime-root-"+tc.device, fakehost.WithGlibc, call)
		if err != nil {
			return err
		}
		spec := fmt.Sprintf("device %s of a spec of %s (%d device names, %d KiB)", tc.device, tc.label, devices, kib)
		label := "Runtime, create, " + spec + ", cache warm"
		rb, err := newRuntimeBundle(cacheBase, "bundle-"+tc.device, b.bin("gpuctk-runtime"), specDir, vendor, tc.device, cacheBase, root)
		if errors.Is(err, errNoRuntime) {
			b.step("%v", err)
			b.r.missing(label, "runc create on the config gpuctk-runtime writes", err.Error(), tc.target)
			continue
		}
		if err != nil {
			return err
		}
		jobs, err := rb.jobs(b.bin("gpuctk-runtime"))
		if err != nil {
			return err
		}
		b.step("timing: runtime, %s", spec)
		s, err := interleave(runtimeRuns(b.o), b.o.warm, jobs...)
		if err != nil {
			return err
		}
		// The target rows' jobs again, alone, for three times as many
		// pairs more (300 at the default -runs):
		// runc create's noise leaves 100 pairs a confidence interval some
		// 4 ms wide, too wide to tell 3 ms from 5.
		b.step("timing: runtime, %s, the targets' pairs again", spec)
		more, err := interleave(3*runtimeRuns(b.o), 0, jobs[1], jobs[2], jobs[3])
		if err != nil {
			return err
		}
		b.r.timed(label, "runc create on the config gpuctk-runtime writes", s[1].join(more[0]), s[2].join(more[1]), tc.target)
		b.r.timed("Runtime, create, the same, first create after a spec change gpuctk did not make (cache emptied)", "runc create on the config gpuctk-runtime writes", s[1].join(more[0]), s[3].join(more[2]), 5*time.Millisecond)
		if err := b.afterGenerate(tc.device, tc.sharing, vendor, cacheBase, root); err != nil {
			return err
		}
		b.r.timed("Runtime, the same, its own work: /bin/true in place of runc, cache warm", "/bin/true with the same arguments", s[4], s[5], 5*time.Millisecond)
		b.r.timed("Runtime, the same, its own work, cache emptied", "/bin/true with the same arguments", s[4], s[6], 0)
		b.r.timed("Whole GPU cost at create, cache warm: runtime, hook, mounts, device nodes ("+tc.device+")", "runc create, no device", s[0], s[2], 0)
		mem, err := rb.memoryJob(b.bin("gpuctk-runtime"))
		if err != nil {
			return err
		}
		m, err := interleave(b.o.runs, 0, job{name: "no-op", cmds: [][]string{{"/bin/true"}}, memory: true}, mem)
		if err != nil {
			return err
		}
		b.r.memory("Peak memory (max RSS), gpuctk-runtime create, "+tc.device+" of "+tc.label+", cache cold", "no-op process (true)", m[0], m[1], 8<<10)
	}
	return nil
}

// afterGenerate times the first create after `gpuctk cdi generate`
// rewrote the spec, which then fills gpuctk-runtime's cache. The spec is
// generate's own, from a fake driver root (the rows above point a
// generated spec's mounts at stand-ins, a change gpuctk did not make), in
// a spec dir of its own; generate runs before each create, untimed.
func (b *bench) afterGenerate(device, sharing, vendor, cacheBase string, root *hookRoot) error {
	driverRoot := filepath.Join(b.work, "driver-"+largestProfile)
	if _, err := os.Stat(driverRoot); err != nil {
		profile, err := inventory.LoadProfile(largestProfile)
		if err != nil {
			return err
		}
		if err := fakehost.Build(driverRoot, profile); err != nil {
			return err
		}
	}
	specDir := filepath.Join(b.work, "cdi-generated-"+device)
	config := filepath.Join(b.work, "generated-"+device+".toml")
	generate := []string{b.bin("gpuctk"), "cdi", "generate", "--simulate", largestProfile, "--driver-root", driverRoot,
		"--vendor", vendor, "--hook-path", b.bin("gpuctk-hook"), "--config", config, "--output", filepath.Join(specDir, "gpuctk.yaml")}
	// The first spec, for the bundle's injected config (generatedJobs
	// then adds the runtime's spec dir and cache to the configuration).
	if err := os.WriteFile(config, []byte(sharing), 0o644); err != nil {
		return err
	}
	if out, err := exec.Command(generate[0], generate[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("gpuctk cdi generate: %v: %s", err, out)
	}
	rb, err := newRuntimeBundle(cacheBase, "bundle-generated-"+device, b.bin("gpuctk-runtime"), specDir, vendor, device, cacheBase, root)
	if errors.Is(err, errNoRuntime) {
		return nil // said with the rows above
	}
	if err != nil {
		return err
	}
	jobs, err := rb.generatedJobs(b.bin("gpuctk-runtime"), config, sharing, generate)
	if err != nil {
		return err
	}
	b.step("timing: runtime, %s, first create after gpuctk cdi generate", device)
	s, err := interleave(runtimeRuns(b.o), b.o.warm, jobs...)
	if err != nil {
		return err
	}
	b.r.timed("Runtime, create, the same, first create after `gpuctk cdi generate` rewrote the spec", "runc create on the config gpuctk-runtime writes, after the same generate", s[0], s[1], 5*time.Millisecond)
	return nil
}

// standIns makes the spec at path mount files under fake instead of the
// host's driver files, which this machine lacks, and creates them there.
func standIns(path, fake string) (*hookCall, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	spec, err := cdiapi.ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("the generated spec %s: %w", path, err)
	}
	call, err := specHook(spec)
	if err != nil {
		return nil, err
	}
	for _, m := range spec.ContainerEdits.Mounts {
		var content []byte
		if soname, ok := call.sonames[m.ContainerPath]; ok {
			obj, err := fakehost.SharedObject(soname)
			if err != nil {
				return nil, err
			}
			if content, err = os.ReadFile(obj); err != nil {
				return nil, err
			}
		}
		dst := filepath.Join(fake, m.HostPath)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(dst, content, 0o755); err != nil {
			return nil, err
		}
		quoted := func(p string) []byte { return fmt.Appendf(nil, "hostPath: %q\n", p) }
		data = bytes.ReplaceAll(data, quoted(m.HostPath), quoted(dst))
	}
	return call, os.WriteFile(path, data, 0o644)
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
