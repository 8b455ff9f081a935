package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/cdientry"
	"github.com/gpuctk/gpuctk/internal/filekind"
	"github.com/gpuctk/gpuctk/internal/jsonobj"
	"github.com/gpuctk/gpuctk/internal/quote"
)

// Runtime is one invocation of gpuctk-runtime.
type Runtime struct {
	cfg *config.Config
	// cfgErr is why the configuration could not be loaded: create fails
	// with it, other commands run with the defaults.
	cfgErr error
	exec   func(path string, argv, env []string) error
	env    []string
	// resolve makes the cache entry of specs gpuctk-runtime does not
	// read itself.
	resolve func(dirs []string) ([]byte, error)
	// level is the log level the environment asks for: "" (runc's
	// --debug decides), "debug", "info" or "error" (quiet).
	level string
	// mapEntry maps a cache entry: mapCacheFile, or in tests one that
	// changes the file under its mapping.
	mapEntry func(r *os.Root, name string) (data []byte, release func(), err error)
}

// LogLevels are the levels WithLogLevel takes.
var LogLevels = []string{"debug", "info", "error"}

// WithLogLevel sets the level of the entries gpuctk-runtime logs: "debug"
// logs what runc's --debug would, "error" (quiet) only failures; "" leaves
// it to runc's --debug.
func WithLogLevel(level string) Option { return func(r *Runtime) { r.level = level } }

// Option configures a Runtime.
type Option func(*Runtime)

// WithConfig sets the configuration (default: config.Default()).
func WithConfig(c *config.Config) Option { return func(r *Runtime) { r.cfg = c } }

// WithConfigError says the configuration could not be loaded. A broken
// configuration fails create, in runc's log too, but not the other
// commands, with config.Default(): it must not keep containers from being
// stopped and deleted.
func WithConfigError(err error) Option { return func(r *Runtime) { r.cfgErr = err } }

// WithExec replaces syscall.Exec, for tests: the function gets the real
// runtime's path, its argv and its environment.
func WithExec(f func(path string, argv, env []string) error) Option {
	return func(r *Runtime) { r.exec = f }
}

// WithResolver replaces the `gpuctk cdi resolve` child that resolves the
// specs gpuctk-runtime does not read itself, for tests: the function
// returns the cache entry (see Entry) of the spec dirs.
func WithResolver(f func(dirs []string) ([]byte, error)) Option {
	return func(r *Runtime) { r.resolve = f }
}

// New returns a Runtime.
func New(opts ...Option) *Runtime {
	r := &Runtime{exec: syscall.Exec, env: os.Environ(), resolve: resolveChild, mapEntry: mapCacheFile}
	for _, o := range opts {
		o(r)
	}
	if r.cfg == nil {
		r.cfg = config.Default()
	}
	return r
}

// Run handles a runc command line (without the program name): it prepares
// the bundle on create, then execs the real runtime with args untouched.
// It returns only on error, or after a replaced exec returns.
func (r *Runtime) Run(args []string) error {
	inv := parseArgs(args)
	// runc prints its help or version instead of creating anything.
	if inv.command != "create" || inv.help || inv.version {
		real, err := r.realRuntime()
		if err != nil {
			r.fail(inv, err)
			return err
		}
		return r.execv(real, args)
	}

	if r.cfgErr != nil {
		err := fmt.Errorf("create %s: %w", inv.id, r.cfgErr)
		log := newLogger("", inv, r.level)
		log.Errorf("%v", err)
		log.Close()
		return err
	}
	log := newLogger(r.cfg.Runtime.LogFile, inv, r.level)
	defer log.Close()
	real, err := r.realRuntime()
	if err == nil {
		err = r.create(inv, log)
	}
	if err != nil {
		err = fmt.Errorf("create %s: %w", inv.id, err)
		log.Errorf("%v", err)
		return err
	}
	log.Close()
	return r.execv(real, args)
}

func (r *Runtime) execv(path string, args []string) error {
	argv := append([]string{path}, args...)
	if err := r.exec(path, argv, r.env); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}

// fail logs an error of the pass-through path.
func (r *Runtime) fail(inv invocation, err error) {
	log := newLogger(r.cfg.Runtime.LogFile, inv, r.level)
	log.Errorf("%s: %v", inv.command, err)
	log.Close()
}

// systemDirs are searched after PATH: podman runs the runtime's delete
// with no PATH at all.
const systemDirs = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// realRuntime finds the first configured runtime on PATH or in the system
// folders, skipping this binary in case it was installed under one of
// those names.
func (r *Runtime) realRuntime() (string, error) {
	var self os.FileInfo
	if exe, err := os.Executable(); err == nil {
		self, _ = os.Stat(exe)
	}
	for _, name := range r.cfg.Runtime.Runtimes {
		candidates := []string{name}
		if !strings.Contains(name, "/") {
			for d := range strings.SplitSeq(systemDirs, ":") {
				candidates = append(candidates, filepath.Join(d, name))
			}
		}
		for _, c := range candidates {
			p, err := exec.LookPath(c)
			if err != nil {
				continue
			}
			if fi, err := os.Stat(p); err == nil && self != nil && os.SameFile(fi, self) {
				continue
			}
			return p, nil
		}
	}
	where := config.DefaultPath
	if r.cfg.Path != "" {
		where = r.cfg.Path
	}
	return "", fmt.Errorf("no low-level runtime found: none of %s is on PATH or in %s (install runc or set [runtime] runtimes in %s)",
		strings.Join(r.cfg.Runtime.Runtimes, ", "), systemDirs, where)
}

// create edits the bundle's config.json when the container asks for
// devices and leaves it alone when it does not.
func (r *Runtime) create(inv invocation, log *logger) error {
	bundle := inv.bundle
	if bundle == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		bundle = wd
	}
	path := filepath.Join(bundle, "config.json")
	data, err := readConfig(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("bundle %s has no config.json: pass the bundle with --bundle", bundle)
		}
		return fmt.Errorf("bundle %s: %w", bundle, err)
	}
	doc, err := parseDocument(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	// The members that say whether the container asks for devices first;
	// most containers ask for nothing.
	process, err := doc.child("process")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var asked specs.Spec
	var env []string
	for key, dst := range map[string]any{"annotations": &asked.Annotations, "mounts": &asked.Mounts} {
		if err := doc.decode(key, dst); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := process.decode("env", &env); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if process != nil {
		asked.Process = &specs.Process{Env: env}
	}
	kind := r.cfg.CDI.Vendor + "/" + r.cfg.CDI.Class
	req, err := requested(&asked, kind, *r.cfg.Runtime.AcceptVisibleDevicesEnv)
	if err != nil {
		return err
	}
	if req == nil {
		log.Debugf("create %s: no device requested; %s passed through", inv.id, path)
		return nil
	}
	if req.wantsCapabilities() {
		var unknown []string
		req.optional, unknown = capabilities(&asked, kind)
		if len(unknown) > 0 {
			log.Warnf("create %s: %s names capabilities gpuctk does not know, ignored: %s (known: compute, utility, %s, all)", inv.id, CapabilitiesVar, quote.List(unknown, maxListed), capabilityNames())
		}
	}
	e, err := readEditable(doc, asked.Annotations, asked.Mounts, process, env)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := r.inject(&e.spec, req, kind, log); err != nil {
		return err
	}
	setVoid(&e.spec)
	if dropLegacyHooks(&e.spec) {
		log.Infof("create %s: dropped the legacy nvidia-container-runtime-hook", inv.id)
	}
	out, err := e.bytes()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	// Atomic for runc, which reads it next; an fsync would add the disk's
	// latency to every start for a file no crash needs.
	if err := atomicfile.WriteFileNoSync(path, out, mode); err != nil {
		return err
	}
	if req.commonOnly {
		log.Infof("create %s: injected the driver of %s without devices (%s)", inv.id, kind, req.source)
	} else {
		log.Infof("create %s: injected %s (from %s)", inv.id, quote.List(req.devices, maxListed), req.source)
	}
	return nil
}

// readConfig reads config.json as os.ReadFile does, following a link as
// runc does, but only a regular file: a FIFO (opened without blocking)
// would hang the create, a device such as /dev/zero would be read until
// memory runs out.
func readConfig(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a regular file", filepath.Base(path), filekind.Name(fi.Mode()))
	}
	// One allocation of the file's size, as os.ReadFile makes.
	data := make([]byte, 0, max(fi.Size()+1, 512))
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}

// inject resolves the request and applies the edits: from the resolved-
// device cache when it can answer, else from an entry made now (by
// gpuctkSpec, or by the CDI library in a `gpuctk cdi resolve` child),
// which then fills the cache.
func (r *Runtime) inject(spec *specs.Spec, req *request, kind string, log *logger) error {
	dirs := r.cfg.CDI.SpecDirs
	var root *os.Root
	if r.cfg.Runtime.CacheDir != "" {
		var err error
		if root, err = openCache(r.cfg.Runtime.CacheDir); err != nil {
			log.Debugf("no device cache: %v", err)
			root = nil
		} else {
			defer root.Close()
		}
	}
	var (
		fp      string
		replace bool
		data    []byte
	)
	if root != nil {
		fp, _ = fingerprint(dirs)
		d, release, err := r.mapEntry(root, fp)
		switch {
		case err == nil:
			defer release()
			data = d
		case !errors.Is(err, fs.ErrNotExist):
			replace = true
		}
	}
	// The mapped bytes are read only under mappedEdits' guard, even to
	// tell a whole entry (requestEdits does): one cut short under the
	// mapping faults wherever it is first touched.
	if data != nil {
		if edits, ok, err := mappedEdits(data, req, dirs, kind); ok {
			if err != nil {
				return err
			}
			return applyRequest(spec, edits, req, kind)
		}
		replace = true
	}
	if root != nil {
		log.Debugf("device cache: no entry %s for the spec dirs' current state: resolving them", fp)
	}
	data, err := r.resolveAll(dirs)
	if err != nil {
		return fmt.Errorf("inject %s: %w", req.what(), err)
	}
	// Cache what was read only if the specs are what the fingerprint
	// describes: unchanged while they were read, and not changed so
	// recently that a rewrite within the same timestamp tick (a jiffy,
	// 10 ms at most) would go unseen.
	if root != nil {
		if fp2, newest := fingerprint(dirs); fp2 == fp && time.Since(newest) > racyWindow {
			if err := writeCache(root, fp, data, replace); errors.Is(err, errTooLarge) {
				log.Warnf("device cache %s: %v", r.cfg.Runtime.CacheDir, err)
			}
		}
	}
	// Said once per state of the spec dirs, when they are read: the
	// creates the cache answers say nothing.
	if index, ok := entryIndex(data); ok {
		for _, e := range index.Errors[:min(len(index.Errors), maxListed)] {
			log.Warnf("CDI spec not loaded: %s", quote.Clip(e, maxSpecError))
		}
		if n := len(index.Errors) - maxListed; n > 0 {
			log.Warnf("and %d more CDI specs not loaded: `gpuctk cdi list` lists them", n)
		}
	}
	if ok, err := applyEntry(spec, data, req, dirs, kind); ok {
		return err
	}
	return fmt.Errorf("inject %s: the resolved devices of %s cannot be read", req.what(), strings.Join(dirs, ", "))
}

// mappedEdits is requestEdits of an entry mapped from its file: a file
// cut short under the mapping (by hand: the cache never truncates an
// entry) makes reading it fault, which then counts as an entry that
// cannot answer rather than a crash. Nothing it returns points into data.
func mappedEdits(data []byte, req *request, dirs []string, kind string) (edits []*cdispec.ContainerEdits, ok bool, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if _, fault := p.(interface{ Addr() uintptr }); !fault {
				panic(p)
			}
			edits, ok, err = nil, false, nil
		}
	}()
	return requestEdits(data, req, dirs, kind)
}

// applyEntry applies the edits of the request from an entry; ok is false
// when the entry cannot answer.
func applyEntry(spec *specs.Spec, data []byte, req *request, dirs []string, kind string) (ok bool, err error) {
	edits, ok, err := requestEdits(data, req, dirs, kind)
	if !ok || err != nil {
		return ok, err
	}
	return true, applyRequest(spec, edits, req, kind)
}

// requestEdits reads the edits of the request from an entry, in the order
// they apply; ok is false when the entry cannot answer, and err is what
// the entry says is wrong with the request (devices no spec provides, no
// spec of the kind).
func requestEdits(data []byte, req *request, dirs []string, kind string) (edits []*cdispec.ContainerEdits, ok bool, err error) {
	if req.commonOnly {
		commons, ok := entryCommon(data, kind)
		if !ok {
			return nil, false, nil
		}
		if len(commons) == 0 {
			var errs []string
			if index, ok := entryIndex(data); ok {
				errs = index.Errors
			}
			return nil, true, fmt.Errorf("%s: no CDI spec in %s is of kind %s%s",
				req.source, strings.Join(dirs, ", "), kind, specErrorsNote(errs))
		}
		return commons, true, nil
	}
	var (
		e       *cdispec.ContainerEdits
		unknown []string
		index   *cacheIndex
	)
	withOptional(req, func(devices []string) []string {
		e, unknown, index, ok = entryEdits(data, devices)
		return unknown
	})
	switch {
	case !ok:
		return nil, false, nil
	case len(unknown) > 0:
		return nil, true, unknownDevices(unknown, req, dirs, index.Devices, index.Errors)
	}
	return []*cdispec.ContainerEdits{e}, true, nil
}

// applyRequest applies the edits requestEdits read.
func applyRequest(spec *specs.Spec, edits []*cdispec.ContainerEdits, req *request, kind string) error {
	for _, e := range edits {
		if err := applyEdits(spec, e); err != nil {
			if req.commonOnly {
				return fmt.Errorf("common edits of a %s spec: %w", kind, err)
			}
			return fmt.Errorf("inject %s: %w", quote.List(req.devices, maxListed), err)
		}
	}
	return nil
}

// what names the request's devices for messages.
func (req *request) what() string {
	if req.commonOnly {
		return "the driver (" + req.source + ")"
	}
	return quote.List(req.devices, maxListed)
}

// withOptional asks lookup for req's devices and its optional ones, then,
// when lookup did not know some of the optional ones, again without
// them: capability devices the spec lacks are left out, not errors.
func withOptional(req *request, lookup func(devices []string) (unknown []string)) {
	unknown := lookup(append(slices.Clone(req.devices), req.optional...))
	if len(unknown) == 0 || len(req.optional) == 0 {
		return
	}
	absent := map[string]bool{}
	for _, u := range unknown {
		absent[u] = true
	}
	have := slices.DeleteFunc(slices.Clone(req.optional), func(d string) bool { return absent[d] })
	lookup(append(slices.Clone(req.devices), have...))
}

// resolveAll reads every device of the spec dirs into a cache entry:
// gpuctk's own spec alone by gpuctkSpec, anything else by the library,
// in a child process.
func (r *Runtime) resolveAll(dirs []string) ([]byte, error) {
	if data, err := GpuctkEntry(dirs); err == nil {
		return data, nil
	}
	return r.resolve(dirs)
}

// GpuctkEntry is the cache entry of the spec dirs when they hold one spec
// alone, in the YAML gpuctk writes (see gpuctkSpec); an error when the
// library must read them.
func GpuctkEntry(dirs []string) ([]byte, error) {
	s, js, err := gpuctkSpec(dirs)
	if err != nil {
		return nil, err
	}
	// The edits go in as read: their JSON, not encoded again.
	vendor, class := parser.ParseQualifier(s.Kind)
	list := make([]cdientry.Device, len(s.Devices))
	for i := range s.Devices {
		list[i] = cdientry.Device{Name: parser.QualifiedName(vendor, class, s.Devices[i].Name),
			Edits: &s.Devices[i].ContainerEdits, JSON: js.devices[i]}
	}
	slices.SortFunc(list, func(a, b cdientry.Device) int { return strings.Compare(a.Name, b.Name) })
	return cdientry.Encode(nil, []cdientry.Spec{{Kind: s.Kind, Edits: &s.ContainerEdits, JSON: js.common}}, list)
}

// capabilityNames lists the capabilities beyond compute and utility.
func capabilityNames() string {
	var names []string
	for _, c := range capability.Extra() {
		names = append(names, string(c))
	}
	return strings.Join(names, ", ")
}

// unknownDevices names the devices no spec provides and those that exist.
// racyWindow is how long after a spec changes its resolved devices are
// not cached.
const racyWindow = 50 * time.Millisecond

// maxListed bounds the devices an unknown-device error names: a large
// host's spec has over a thousand.
const maxListed = 12

func unknownDevices(unknown []string, req *request, dirs, have, errs []string) error {
	known := "provide no device at all: run `gpuctk cdi generate`"
	if len(have) > 0 {
		known = "provide " + quote.List(have, maxListed)
	}
	if len(have) > maxListed {
		known += " (`gpuctk cdi list` shows them all)"
	}
	what := "device"
	if len(unknown) > 1 {
		what = "devices"
	}
	return fmt.Errorf("unknown %s %s (requested by %s): the CDI specs in %s %s%s",
		what, quote.List(unknown, maxListed), req.source, strings.Join(dirs, ", "), known, specErrorsNote(errs))
}

func specErrorsNote(errs []string) string {
	if len(errs) == 0 {
		return ""
	}
	// A few, each bounded: a foreign spec's error may quote a name of
	// megabytes, and 150 files may fail.
	const shown = 3
	var b strings.Builder
	for i, e := range errs[:min(len(errs), shown)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(quote.Clip(strings.ReplaceAll(e, "\n", "; "), maxSpecError))
	}
	if n := len(errs) - shown; n > 0 {
		fmt.Fprintf(&b, "; and %d more: `gpuctk cdi list` shows them", n)
	}
	return " (specs that failed to load: " + b.String() + ")"
}

// maxSpecError bounds a spec's load error quoted in a message.
const maxSpecError = 1000

// setVoid leaves NVIDIA_VISIBLE_DEVICES=void, once, so that neither this
// runtime nor a legacy hook injects again.
func setVoid(spec *specs.Spec) {
	if spec.Process == nil {
		spec.Process = &specs.Process{}
	}
	env := slices.DeleteFunc(spec.Process.Env, func(e string) bool { return strings.HasPrefix(e, EnvVar+"=") })
	spec.Process.Env = append(env, EnvVar+"=void")
}

// dropLegacyHooks drops the hooks of NVIDIA's container toolkit that docker
// adds for --gpus; they would inject a second time, or fail without their
// driver library.
func dropLegacyHooks(spec *specs.Spec) bool {
	if spec.Hooks == nil {
		return false
	}
	n := len(spec.Hooks.Prestart)
	spec.Hooks.Prestart = slices.DeleteFunc(spec.Hooks.Prestart, func(h specs.Hook) bool {
		switch filepath.Base(h.Path) {
		case "nvidia-container-runtime-hook", "nvidia-container-toolkit":
			return true
		}
		return false
	})
	return len(spec.Hooks.Prestart) != n
}

// jsonError adds the line and column to a JSON syntax error.
func jsonError(data []byte, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := map[reflect.Kind]string{reflect.Struct: "an object", reflect.Map: "an object", reflect.Slice: "an array",
			reflect.String: "a string", reflect.Bool: "a boolean"}[te.Type.Kind()]
		if want == "" {
			want = "a number"
		}
		// Both quote the document: a number may be a megabyte long.
		return fmt.Errorf("not a valid OCI spec: %q is %s %s, want %s", quote.Clip(te.Field, quote.Bytes), article(te.Value), quote.Clip(te.Value, quote.Bytes), want)
	}
	var dup *jsonobj.DuplicateKeyError
	if errors.As(err, &dup) {
		return err
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return fmt.Errorf("not a valid OCI spec: %w", err)
	}
	before := data[:min(int(se.Offset), len(data))]
	line := bytes.Count(before, []byte("\n")) + 1
	col := max(1, len(before)-bytes.LastIndexByte(before, '\n')-1)
	return fmt.Errorf("not valid JSON at line %d column %d: %w", line, col, err)
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}
