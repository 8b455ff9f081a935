package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/internal/cdiresolve"
	"github.com/gpuctk/gpuctk/internal/pagecache"
	"github.com/gpuctk/gpuctk/internal/plural"
	"github.com/gpuctk/gpuctk/internal/quote"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/mps"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/runtime"
)

func cdiCommand() *cli.Command {
	return &cli.Command{
		Name:  "cdi",
		Usage: "generate and list CDI specs",
		Subcommands: []*cli.Command{
			{
				Name:  "generate",
				Usage: "write the CDI spec of this host (stdout when no --output)",
				Flags: append(specFlags(),
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, EnvVars: envVar("output"), Usage: "spec file to write atomically, e.g. /var/run/cdi/nvidia.yaml (- or none: standard output)"},
					&cli.StringFlag{Name: "format", EnvVars: envVar("format"), Usage: "yaml or json (default: from the --output extension, else yaml)"},
					&cli.BoolFlag{Name: "if-driver", EnvVars: envVar("if-driver"), Usage: "when the NVIDIA kernel module is not loaded (no /proc/driver/nvidia/version under the dev root), say so and exit 0 without writing anything (for boot-time refreshes)"},
					&cli.BoolFlag{Name: "if-stale", EnvVars: envVar("if-stale"), Usage: "write --output only when `gpuctk cdi check` would find it stale (missing, or giving containers other edits than the host's now), so an unchanged host's spec keeps its file and runtimes' caches"},
				),
				Action: generate,
			},
			{
				Name:  "check",
				Usage: "compare gpuctk's specs in the spec dirs with the host: one line per stale thing, exit 1 when anything is stale",
				Flags: append(specFlags(),
					&cli.StringSliceFlag{Name: "spec-dir", EnvVars: envVar("spec-dir"), Usage: "spec dir to check (repeatable; default: config [cdi] spec-dirs)"},
				),
				Action: check,
			},
			{
				Name:  "list",
				Usage: "list the devices of the specs in the spec dirs",
				Flags: []cli.Flag{
					configFlag(),
					&cli.StringSliceFlag{Name: "spec-dir", EnvVars: envVar("spec-dir"), Usage: "spec dir to read (repeatable; default: config [cdi] spec-dirs)"},
					&cli.StringFlag{Name: "format", Value: "table", EnvVars: envVar("format"), Usage: "table, json or yaml"},
					&cli.BoolFlag{Name: "json", EnvVars: envVar("json"), Usage: "print JSON (--format json)"},
				},
				Action: list,
			},
			{
				// gpuctk-runtime's: it does not link the CDI library.
				Name:   "resolve",
				Usage:  "print the devices of the spec dirs as the CDI library resolves them, in gpuctk-runtime's cache entry format",
				Hidden: true,
				Flags: []cli.Flag{
					&cli.StringSliceFlag{Name: "spec-dir", Required: true, Usage: "spec dir to read (repeatable)"},
				},
				Action: resolveSpecs,
			},
		},
	}
}

func resolveSpecs(c *cli.Context) error {
	data, err := cdiresolve.Entry(c.StringSlice("spec-dir"))
	if err != nil {
		return err
	}
	_, err = c.App.Writer.Write(data)
	return err
}

func generate(c *cli.Context) error { return generateSpec(c, c.Bool("if-stale")) }

// generateSpec is `gpuctk cdi generate`; ifStale is its --if-stale.
func generateSpec(c *cli.Context, ifStale bool) error {
	// "-" is standard output, as for most tools that write a file.
	out := c.String("output")
	if out == "-" {
		out = ""
	}
	// A usage mistake is said first: before the host is read, and before
	// the driver folder is made.
	if ifStale && out == "" {
		return &usageError{cmd: c.Command.HelpName, err: errors.New("--if-stale needs --output: it compares the spec in that file with the host")}
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	// A host without a loaded driver is not an error for the refresh unit:
	// it runs at every boot and on every driver change, GPU or not.
	if c.Bool("if-driver") && c.String("simulate") == "" {
		version := filepath.Join(cfg.CDI.DevRootOrDriver(), "proc/driver/nvidia/version")
		if _, err := os.Stat(version); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: no NVIDIA driver loaded (%s does not exist): no spec written\n", version)
			return nil
		}
	}
	format, warning, err := cdi.FormatFor(c.String("format"), out)
	if err != nil {
		return err
	}
	if warning != "" {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning:", warning)
	}
	b, err := buildSpec(c, cfg, format, true)
	if err != nil {
		return err
	}
	warnResolution(c, b.set)
	set, data, kind, sum := b.set, b.data, b.kind, b.sum
	if ifStale {
		fresh, err := freshOutput(c, out, data, b.files)
		if err != nil {
			return err
		}
		if fresh {
			// The MPS mount points live in /run: make them even when the
			// spec, in /etc/cdi, outlived a reboot.
			if err := mountPoints(c, cfg, set); err != nil {
				return err
			}
			warmPrograms(c, cfg)
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: %s is fresh (%s): nothing written\n", out, sum)
			return sameNamesBeside(c.App.ErrWriter, out)
		}
	}
	if out == "" {
		if _, err := c.App.Writer.Write(data); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: %s spec: %s\n", kind, sum)
		return nil
	}
	if err := cdi.WriteSpec(out, data); err != nil {
		return err
	}
	// A spec on disk is one runtimes use: its MPS mounts must resolve
	// even before the daemons start (see mps.MountPoints).
	if err := mountPoints(c, cfg, set); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "gpuctk: wrote %s spec to %s: %s\n", kind, out, sum)
	// Now that the spec names this folder, those of older drivers go.
	if b.folder != "" {
		if err := driver.PruneFolders(b.folder); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: warning: %v\n", err)
		}
	}
	// The first container start after this one is then as fast as any.
	// Not an error: gpuctk-runtime resolves the spec itself otherwise.
	if simulatedOnHostState(c, cfg.Runtime.CacheDir) {
		// A simulated host's entries are no real container's.
	} else if _, err := runtime.WarmCache(cfg, out, cdiresolve.Entry); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: warning: gpuctk-runtime's device cache not filled for the new spec (its first create resolves it): %v\n", err)
	}
	warmPrograms(c, cfg)
	return sameNamesBeside(c.App.ErrWriter, out)
}

// mountPoints makes the MPS mount points of set's devices, but for a
// simulated host under the real host's state root.
func mountPoints(c *cli.Context, cfg *config.Config, set *offer.Set) error {
	if len(set.MPS()) > 0 && simulatedOnHostState(c, cfg.MPS.StateRoot) {
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: --simulate: the MPS mount points are not made under the host's own state root %s (set [mps] state-root, or --state-root, to make them elsewhere)\n", cfg.MPS.StateRoot)
		return nil
	}
	return mps.MountPoints(set.MPS())
}

// sameNamesBeside returns an error naming the spec files of out's folder
// that define names out defines: CDI readers then resolve none of those
// names from the folder (the spec written as JSON beside the YAML of an
// earlier run, or a copy of it), so containers would get no device. Only
// out's names are looked up, so the work is linear in the folder's names
// however many other specs define the same ones. Files of the folder that
// do not load (another vendor's FIFO, a broken spec) are warnings on w:
// CDI runtimes that read the folder fail or hang on them.
func sameNamesBeside(w io.Writer, out string) error {
	set := cdiresolve.Load([]string{filepath.Dir(out)})
	for _, e := range set.Errors {
		fmt.Fprintf(w, "gpuctk: warning: spec beside %s not loaded: %v\n", filepath.Base(out), e)
	}
	own := slices.IndexFunc(set.Specs, func(s cdiresolve.Spec) bool { return filepath.Base(s.Path) == filepath.Base(out) })
	if own < 0 {
		return nil
	}
	shared := map[int]int{} // another spec -> the names of out it defines
	total := 0
	for _, d := range set.Specs[own].Devices {
		dev := set.Specs[own].GetDevice(d.Name)
		if dev == nil {
			continue
		}
		defs := set.Defined[dev.GetQualifiedName()]
		for _, i := range defs {
			if i != own {
				shared[i]++
			}
		}
		if len(defs) > 1 {
			total++
		}
	}
	others := slices.Sorted(maps.Keys(shared))
	switch len(others) {
	case 0:
		return nil
	case 1:
		other := set.Specs[others[0]].Path
		return fmt.Errorf("%s defines the same %s as %s: CDI readers resolve none of them from one folder, so containers get no device; remove %s", other, plural.Count(shared[others[0]], "device name"), out, other)
	}
	paths := make([]string, len(others))
	for i, o := range others {
		paths[i] = set.Specs[o].Path
	}
	return fmt.Errorf("%s define %s that %s defines: CDI readers resolve none of them from one folder, so containers get no device; remove those specs", quote.List(paths, 3), plural.Count(total, "device name"), out)
}

// warmPrograms reads the files of the hook and of gpuctk-runtime into the
// page cache (see package pagecache): the refresh unit writes the spec at
// boot, before the engines start, so the first containers find them
// cached as cheaply as any later one does (0.3 to 0.4 ms less per hook
// run than a file brought in by its first exec, on this project's 6.18
// kernel). A file that is not there is left to the checks that report it.
func warmPrograms(c *cli.Context, cfg *config.Config) {
	for _, p := range []string{cfg.CDI.HookPath, runtimeBinary()} {
		if err := pagecache.Warm(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: warning: %v: not read into the page cache ahead of the first container\n", err)
		}
	}
}

// specFlags are the flags that decide what the spec holds: generate and
// check take the same, so a spec written with them checks fresh.
func specFlags() []cli.Flag {
	return append(hostFlags(),
		&cli.StringFlag{Name: "hook-path", EnvVars: envVar("hook-path"), Usage: "gpuctk-hook on the host (default: config [cdi] hook-path)"},
		&cli.StringFlag{Name: "vendor", EnvVars: envVar("vendor"), Usage: "vendor of the spec's kind (default: config, nvidia.com)"},
		&cli.StringFlag{Name: "class", EnvVars: envVar("class"), Usage: "class of the spec's kind (default: config, gpu)"},
		&cli.StringSliceFlag{Name: "device-name-strategy", EnvVars: envVar("device-name-strategy"), Usage: "names whole devices get, as nvidia-ctk's flag: index, gpu:mig, uuid, type-index (repeatable; default: config [cdi] device-names, index, gpu:mig and uuid)"},
		&cli.BoolFlag{Name: "cuda-compat", EnvVars: envVar("cuda-compat"), Usage: "let the hook put an image's newer CUDA forward-compatibility libraries first, where every GPU of the host supports it (default: config [cdi] cuda-compat, true; --cuda-compat=false turns it off)"},
		&cli.BoolFlag{Name: "driver-folder", EnvVars: envVar("driver-folder"), Usage: "mount the driver's files as one folder of hard links per capability, made under the driver root, the hook linking each file's usual path into it; where it cannot be made, each file is mounted (default: config [cdi] driver-folder, true)"},
		&cli.StringFlag{Name: "driver-store", EnvVars: envVar("driver-store"), Usage: "where the driver folder is made when its hard links cannot be made under the driver root: copies, cloned where the file system can (default: config [cdi] driver-store, else /var/lib/gpuctk/driver under the driver root)"},
		&cli.BoolFlag{Name: "disable-device-node-modification", EnvVars: envVar("disable-device-node-modification"), Usage: "have the hook give containers a driver params file saying ModifyDeviceFiles: 0, so the CUDA driver in a container creates no device nodes (default: config [cdi] disable-device-node-modification, true)"},
	)
}

// refreshSpec is the spec gpuctk-cdi-refresh.service writes.
const refreshSpec = "/var/run/cdi/nvidia.yaml"

// built is the spec the host gives now, with what checking a spec against
// it needs.
type built struct {
	set   *offer.Set
	data  []byte
	kind  string
	sum   cdi.Summary
	files cdi.HostFiles
	// folder is the driver folder the spec mounts, "" for none; whole
	// the driver's own folders it mounts whole.
	folder   string
	whole    []string
	oneByOne int
}

// buildSpec resolves the host and builds its spec in format, as generate
// writes it; create makes the driver folder where it is missing (see
// loadFiles).
func buildSpec(c *cli.Context, cfg *config.Config, format string, create bool) (*built, error) {
	set, p, err := resolve(c, cfg)
	if err != nil {
		return nil, err
	}
	return buildFor(c, cfg, set, p, format, create)
}

// buildFor builds the spec of a resolved host.
func buildFor(c *cli.Context, cfg *config.Config, set *offer.Set, p *inventory.Profile, format string, create bool) (*built, error) {
	files, folder, err := loadFiles(c, cfg, set.Host, p, create)
	if err != nil {
		return nil, err
	}
	data, kind, sum, err := cdi.Build(set, files, cfg, format)
	if err != nil {
		return nil, err
	}
	return &built{set: set, data: data, kind: kind, sum: sum, files: hostFiles(c, cfg, p), folder: folder, whole: files.Whole, oneByOne: files.OneByOne}, nil
}

// hostFiles says where cdi.Check finds the files a spec names: nowhere for
// a simulated host without --driver-root or --dev-root, whose files are
// a standard install's, not this machine's.
func hostFiles(c *cli.Context, cfg *config.Config, p *inventory.Profile) cdi.HostFiles {
	if p != nil && !c.IsSet("driver-root") && !c.IsSet("dev-root") {
		return cdi.HostFiles{}
	}
	return cdi.HostFiles{DriverRoot: cfg.CDI.DriverRoot, HostDriverRoot: cfg.CDI.HostDriverRoot, DevRoot: cfg.CDI.DevRootOrDriver()}
}

// freshOutput reports whether the spec at out gives containers what data
// does, saying on stderr what is stale when it does not.
func freshOutput(c *cli.Context, out string, data []byte, hf cdi.HostFiles) (bool, error) {
	old, err := cdi.ReadSpecFile(out)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: %s does not exist: writing it\n", out)
		return false, nil
	}
	if err != nil {
		// Whatever is there, the atomic write replaces it.
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: %v: writing it\n", err)
		return false, nil
	}
	stale, err := cdi.Check(out, old, data, hf)
	if err != nil {
		return false, err
	}
	for _, s := range stale {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: stale:", s)
	}
	return len(stale) == 0, nil
}

// checkResult is what checkSpecs found: the specs checked, their stale
// things, notes on the specs not judged, the specs that could not be read,
// and the fix of each stale spec.
type checkResult struct {
	specs []string
	stale []cdi.Stale
	notes []string
	errs  []error
	fixes []string
}

// checkSpecs compares gpuctk's specs of the configured kind in the spec
// dirs with the spec the host gives now (want).
func checkSpecs(cfg *config.Config, kind string, want []byte, hf cdi.HostFiles) (checkResult, error) {
	var r checkResult
	own, notes, errs := cdi.OwnSpecs(cfg.CDI.SpecDirs, kind)
	r.notes, r.errs = notes, errs
	for _, o := range own {
		r.specs = append(r.specs, o.Path)
		st, err := cdi.Check(o.Path, o.Data, want, hf)
		if err != nil {
			return r, err
		}
		r.stale = append(r.stale, st...)
		if len(st) > 0 {
			fix := fmt.Sprintf("run `gpuctk cdi generate --output %s`", o.Path)
			if o.Path == refreshSpec {
				fix = "run `systemctl start gpuctk-cdi-refresh.service` or `gpuctk cdi generate --output " + refreshSpec + "`"
			}
			r.fixes = append(r.fixes, fmt.Sprintf("%s is stale (%s): %s", o.Path, plural.Count(len(st), "difference"), fix))
		}
	}
	return r, nil
}

func check(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	b, err := buildSpec(c, cfg, "yaml", false)
	if err != nil {
		return err
	}
	r, err := checkSpecs(cfg, b.kind, b.data, b.files)
	if err != nil {
		return err
	}
	for _, n := range r.notes {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: note:", n)
	}
	for _, s := range r.stale {
		fmt.Fprintln(c.App.Writer, s)
	}
	for _, e := range r.errs {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk:", e)
	}
	for _, f := range r.fixes {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk:", f)
	}
	switch {
	case len(r.errs) > 0:
		return fmt.Errorf("%s could not be read (above)", plural.Count(len(r.errs), "spec"))
	case len(r.specs) == 0:
		return fmt.Errorf("no %s spec written by gpuctk in %s: run `gpuctk cdi generate --output %s`", b.kind, strings.Join(cfg.CDI.SpecDirs, ", "), refreshSpec)
	case len(r.fixes) > 0:
		return fmt.Errorf("%d of %s stale: regenerate as said above", len(r.fixes), plural.Count(len(r.specs), "spec"))
	}
	fmt.Fprintf(c.App.ErrWriter, "gpuctk: fresh: %s matches this host (%s)\n", strings.Join(r.specs, ", "), b.sum)
	return nil
}

func list(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if f := c.String("format"); f != "table" && f != "json" && f != "yaml" {
		return &usageError{cmd: c.Command.HelpName, err: fmt.Errorf("--format %q is not known: use table, json or yaml", f)}
	}
	devices, conflicts, specErrs, err := cdi.List(cfg.CDI.SpecDirs)
	if err != nil {
		return err
	}
	for _, e := range specErrs {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: warning: spec not loaded:", e)
	}
	format := c.String("format")
	if c.Bool("json") {
		format = "json"
	}
	switch format {
	case "json", "yaml":
		if devices == nil {
			devices = []cdi.Listed{}
		}
		if err := printData(c.App.Writer, format, devices); err != nil {
			return err
		}
	case "table":
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "DEVICE\tSPEC")
		for _, d := range devices {
			fmt.Fprintf(w, "%s\t%s\n", d.Name, d.Spec)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		// Conflicting specs hide their names: generating one more
		// would not help.
		if len(devices) == 0 && len(specErrs) == 0 && len(conflicts) == 0 {
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: note: no CDI devices in %s: `gpuctk cdi generate --output %s` writes this host's\n", strings.Join(cfg.CDI.SpecDirs, ", "), refreshSpec)
		}
	}
	for _, cf := range conflicts {
		fmt.Fprintln(c.App.ErrWriter, "gpuctk: conflict:", cf)
	}
	switch n := len(conflicts); {
	case n == 1:
		return fmt.Errorf("specs define the same device names: CDI readers resolve none of them from one folder, and only the latest folder's from several; remove or rename all but one spec")
	case n > 1:
		return fmt.Errorf("%d sets of specs define the same device names: CDI readers resolve none of them from one folder, and only the latest folder's from several; remove or rename all but one spec of each set", n)
	}
	return nil
}

// printData prints v as indented JSON or as YAML.
func printData(w io.Writer, format string, v any) error {
	if format == "yaml" {
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		return enc.Close()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
