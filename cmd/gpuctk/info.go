package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/plural"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:  "info",
		Usage: "show the driver, GPUs, MIG devices, sharing, CDI specs and MPS daemons of this host",
		Flags: append(hostFlags(),
			&cli.StringFlag{Name: "state-root", EnvVars: envVar("state-root"), Usage: "MPS state root (default: config [mps] state-root)"},
			&cli.StringSliceFlag{Name: "spec-dir", EnvVars: envVar("spec-dir"), Usage: "spec dir to list and check (repeatable; default: config [cdi] spec-dirs)"},
			&cli.StringFlag{Name: "host-root", EnvVars: envVar("host-root"), Value: "/", Usage: "where the host's / is, to find what NVIDIA's device plugin, GPU feature discovery and nvidia-ctk left there (Migration)"},
		),
		Action: info,
	}
}

func info(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	set, p, err := resolve(c, cfg)
	if err != nil {
		return err
	}
	h := set.Host
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	source := "NVML"
	if s := c.String("simulate"); s != "" {
		source = "simulated " + s
	}
	fmt.Fprintf(w, "Driver:\t%s, CUDA %s (%s)\n", h.DriverVersion, h.CUDAVersion, source)
	fmt.Fprintf(w, "GPUs:\t%s\n", plural.Count(len(h.GPUs), "GPU"))
	shares := map[string]string{}
	for _, s := range set.Shared {
		shares[s.UUID()] = fmt.Sprintf("%s x%d", s.Strategy, s.Replicas)
	}
	for _, g := range h.GPUs {
		line := fmt.Sprintf("  %d\t%s\t%s\t%d MiB", g.Index, g.Name, g.UUID, g.MemoryMiB)
		switch {
		case g.MIGEnabled:
			profiles := map[string]int{}
			for _, m := range g.MIG {
				profiles[m.Profile]++
			}
			var ps []string
			for p, n := range profiles {
				ps = append(ps, fmt.Sprintf("%d x %s", n, p))
			}
			sort.Strings(ps)
			line += "\tMIG: " + strings.Join(ps, ", ")
		case shares[g.UUID] != "":
			line += "\tshared: " + shares[g.UUID]
		}
		fmt.Fprintln(w, line)
	}
	var migShared []string
	for _, s := range set.Shared {
		if s.MIG != nil {
			migShared = append(migShared, fmt.Sprintf("%s (%s) %s x%d", s.Name(), s.MIG.Profile, s.Strategy, s.Replicas))
		}
	}
	if len(migShared) > 0 {
		fmt.Fprintf(w, "Shared MIG:\t%s\n", strings.Join(migShared, ", "))
	}
	devices, conflicts, specErrs, err := cdi.List(cfg.CDI.SpecDirs)
	if err != nil {
		return err
	}
	perSpec := map[string]int{}
	for _, d := range devices {
		if !d.Capability {
			perSpec[d.Spec]++
		}
	}
	var specs []string
	for p, n := range perSpec {
		specs = append(specs, fmt.Sprintf("%s (%s)", p, plural.Count(n, "device name")))
	}
	sort.Strings(specs)
	if len(specs) == 0 {
		specs = []string{"none in " + strings.Join(cfg.CDI.SpecDirs, ", ") + ": run `gpuctk cdi generate --output /var/run/cdi/nvidia.yaml`"}
	}
	fmt.Fprintf(w, "Specs:\t%s\n", strings.Join(specs, "; "))
	for _, cf := range conflicts {
		fmt.Fprintf(w, "\tconflict: %s\n", cf)
	}
	for _, e := range specErrs {
		fmt.Fprintf(w, "\tnot loaded: %v\n", e)
	}
	freshness(w, c, cfg, set, p)
	if steps := migration(c.String("host-root"), cfg.CDI.SpecDirs, cfg.CDI.Vendor+"/"+cfg.CDI.Class); len(steps) > 0 {
		fmt.Fprintf(w, "Migration:\t%s\n", steps[0])
		for _, s := range steps[1:] {
			fmt.Fprintf(w, "\t%s\n", s)
		}
	}
	if mpsDevs := set.MPS(); len(mpsDevs) > 0 {
		_, m, err := mpsSetup(c, true, false)
		if err != nil {
			return err
		}
		sts, err := m.Status(c.Context, mpsDevs)
		if err != nil {
			return err
		}
		var ds []string
		for _, s := range sts {
			d := fmt.Sprintf("%s %s", s.Device.Name(), state(s))
			if s.PID > 0 {
				d += fmt.Sprintf(" (pid %d)", s.PID)
			}
			ds = append(ds, d)
		}
		fmt.Fprintf(w, "MPS:\t%s\n", strings.Join(ds, ", "))
	}
	return w.Flush()
}

// freshness says whether gpuctk's specs are what the host gives now, as
// `gpuctk cdi check` does, with the first stale things: info is where a
// user looks first when a container lacks a device.
func freshness(w io.Writer, c *cli.Context, cfg *config.Config, set *offer.Set, p *inventory.Profile) {
	const shown = 5
	b, err := buildFor(c, cfg, set, p, "yaml", false)
	var r checkResult
	if err == nil {
		driverFiles(w, cfg, b)
		r, err = checkSpecs(cfg, b.kind, b.data, b.files)
	}
	switch {
	case err != nil:
		fmt.Fprintf(w, "Fresh:\tnot checked: %v\n", err)
		return
	case len(r.specs) == 0:
		fmt.Fprintf(w, "Fresh:\tno spec written by gpuctk to check\n")
		return
	case len(r.stale) == 0:
		fmt.Fprintf(w, "Fresh:\tyes: %s matches this host\n", strings.Join(r.specs, ", "))
		return
	}
	fmt.Fprintf(w, "Fresh:\tno: %s\n", strings.Join(r.fixes, "; "))
	for i, s := range r.stale {
		if i == shown {
			fmt.Fprintf(w, "\tand %d more: run `gpuctk cdi check`\n", len(r.stale)-shown)
			break
		}
		fmt.Fprintf(w, "\tstale: %s\n", s)
	}
}

// driverFiles says how the spec gives containers the driver's files: from
// the driver folder, or a mount each, and why (see driver.Gather). Not
// for a simulated host's standard files, which are not this machine's.
func driverFiles(w io.Writer, cfg *config.Config, b *built) {
	switch {
	case b.files.DriverRoot == "":
	case !*cfg.CDI.DriverFolder:
		fmt.Fprintf(w, "Driver files:\ta mount each ([cdi] driver-folder = false)\n")
	case b.folder != "" && len(b.whole) > 0:
		fmt.Fprintf(w, "Driver files:\tin the driver folder %s, mounted once per capability, and the driver's own folders %s, mounted whole\n", b.folder, strings.Join(b.whole, ", "))
	case b.folder != "":
		fmt.Fprintf(w, "Driver files:\tin the driver folder %s, mounted once per capability\n", b.folder)
	case len(b.whole) > 0 && b.oneByOne == 0:
		fmt.Fprintf(w, "Driver files:\tin the driver's own folders %s, mounted whole\n", strings.Join(b.whole, ", "))
	case len(b.whole) > 0:
		fmt.Fprintf(w, "Driver files:\ta mount each but those in the driver's own folders %s, mounted whole: no driver folder for the others yet (`gpuctk cdi generate` makes it where it can)\n", strings.Join(b.whole, ", "))
	default:
		fmt.Fprintf(w, "Driver files:\ta mount each: no driver folder for these files yet (`gpuctk cdi generate` makes it where it can)\n")
	}
}
