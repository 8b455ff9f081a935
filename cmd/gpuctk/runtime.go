package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/engine"
)

func runtimeCommand() *cli.Command {
	return &cli.Command{
		Name:  "runtime",
		Usage: "set up container engines to run containers through gpuctk-runtime",
		Subcommands: []*cli.Command{{
			Name:  "configure",
			Usage: `add a runtime "nvidia" that runs containers through gpuctk-runtime to containerd, CRI-O or docker`,
			Description: "Containers of the runtime get the CDI devices that their NVIDIA_VISIBLE_DEVICES,\n" +
				"cdi.k8s.io/ annotations or /var/run/nvidia-container-devices mounts ask for.\n\n" +
				"containerd: adds the runtime in a marked block of " + engine.ContainerdConfig + " (config version 1 or 2, which\n" +
				"            containerd 1.7 reads), or writes " + engine.ContainerdDropIn + " and imports it (version 3).\n" +
				"            --cdi also turns on containerd's own CDI support, which the device plugin's\n" +
				"            cdi-cri and cdi-annotations need on 1.7: enable_cdi and cdi_spec_dirs (2.x: cdi_spec_dirs).\n" +
				"crio:       writes " + engine.CrioDropIn + ".\n" +
				"docker:     adds the runtime and features.cdi to " + engine.DockerConfig + ".\n" +
				"podman:     needs nothing.\n\n" +
				"A file of yours that is rewritten is backed up with the suffix " + engine.BackupSuffix + ".\n" +
				"Restart the engine afterwards.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "runtime", EnvVars: envVar("runtime"), Usage: "the engine to configure: containerd, crio, docker or podman", Required: true},
				&cli.StringFlag{Name: "runtime-name", EnvVars: envVar("runtime-name"), Value: "nvidia", Usage: "the name of the runtime (class)"},
				&cli.StringFlag{Name: "runtime-path", EnvVars: envVar("runtime-path"), Usage: "gpuctk-runtime's path (default: the installed one, on PATH, else /usr/bin/gpuctk-runtime)"},
				&cli.BoolFlag{Name: "set-as-default", EnvVars: envVar("set-as-default"), Usage: "make the runtime the engine's default"},
				&cli.StringFlag{Name: "config", EnvVars: envVar("engine-config"), Usage: "the engine's main config (default: " + engine.ContainerdConfig + ", " + engine.CrioConfig + ", " + engine.DockerConfig + ")"},
				&cli.StringFlag{Name: "drop-in", EnvVars: envVar("drop-in"), Usage: "the drop-in to write (default: " + engine.ContainerdDropIn + ", " + engine.CrioDropIn + ")"},
				&cli.BoolFlag{Name: "cdi", EnvVars: envVar("cdi"), Usage: "containerd: turn on its own CDI support (enable_cdi, cdi_spec_dirs), which 1.7 has off"},
				&cli.StringSliceFlag{Name: "cdi-spec-dirs", EnvVars: envVar("cdi-spec-dirs"), Value: cli.NewStringSlice(engine.DefaultCDISpecDirs...), Usage: "with --cdi: the folders containerd reads CDI specs from"},
				&cli.BoolFlag{Name: "dry-run", EnvVars: envVar("dry-run"), Usage: "print the files that would change and change nothing"},
				&cli.BoolFlag{Name: "uninstall", EnvVars: envVar("uninstall"), Usage: "remove what configure added"},
			},
			Action: runtimeConfigure,
		}},
	}
}

func runtimeConfigure(c *cli.Context) error {
	name := c.String("runtime")
	if !slices.Contains(engine.Engines, name) {
		return fmt.Errorf("--runtime %q is not known: use containerd, crio, docker or podman", name)
	}
	o := engine.Options{
		Name:         c.String("runtime-name"),
		Path:         c.String("runtime-path"),
		SetAsDefault: c.Bool("set-as-default"),
		Config:       c.String("config"),
		DropIn:       c.String("drop-in"),
	}
	if c.Bool("cdi") {
		o.CDISpecDirs = c.StringSlice("cdi-spec-dirs")
	} else if c.IsSet("cdi-spec-dirs") {
		return fmt.Errorf("--cdi-spec-dirs without --cdi: add --cdi to turn on containerd's CDI support")
	}
	if o.Path == "" {
		o.Path = runtimeBinary()
	}
	if p, err := filepath.Abs(o.Path); err == nil {
		o.Path = p
	}
	uninstall := c.Bool("uninstall")
	changes, note, err := engine.Plan(name, o, uninstall)
	if err != nil {
		return err
	}
	w := c.App.Writer
	// Folders to remove if empty are tidying, not changes of their own.
	edits := 0
	for _, ch := range changes {
		if !ch.EmptyDir {
			edits++
		}
	}
	if c.Bool("dry-run") {
		for _, ch := range changes {
			if ch.EmptyDir {
				if isEmptyDir(ch.Path) {
					fmt.Fprintf(w, "# %s: would be removed (empty)\n", ch.Path)
				}
				continue
			}
			if ch.Data == nil {
				fmt.Fprintf(w, "# %s: would be removed\n", ch.Path)
				continue
			}
			fmt.Fprintf(w, "# %s: would be written\n%s", ch.Path, ch.Data)
		}
		if edits == 0 {
			fmt.Fprintln(w, "# nothing would change")
		}
		return nil
	}
	// Which tidy-ups will happen, known before the files go.
	wasThere := map[string]bool{}
	for _, ch := range changes {
		if ch.EmptyDir {
			wasThere[ch.Path] = fileExists(ch.Path)
		}
	}
	if err := engine.Apply(changes); err != nil {
		return err
	}
	for _, ch := range changes {
		switch {
		case ch.EmptyDir:
			if wasThere[ch.Path] && !fileExists(ch.Path) {
				fmt.Fprintf(w, "removed %s (empty)\n", ch.Path)
			}
		case ch.Data == nil:
			fmt.Fprintf(w, "removed %s\n", ch.Path)
		case ch.Backup && fileSize(ch.Path+engine.BackupSuffix) > 0:
			fmt.Fprintf(w, "wrote %s (the original is %s)\n", ch.Path, ch.Path+engine.BackupSuffix)
		default:
			fmt.Fprintf(w, "wrote %s\n", ch.Path)
		}
	}
	switch {
	case name == "podman":
		fmt.Fprintln(w, note)
	case edits == 0 && uninstall:
		fmt.Fprintf(w, "%s has no runtime %q from gpuctk: nothing to remove\n", name, o.Name)
	case edits == 0:
		fmt.Fprintf(w, "%s has the runtime %q already: nothing to change\n", name, o.Name)
	default:
		fmt.Fprintln(w, note)
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func isEmptyDir(path string) bool {
	entries, err := os.ReadDir(path)
	return err == nil && len(entries) == 0
}

// runtimeBinary is the installed gpuctk-runtime: the one on PATH, else
// where the packages put it; never the one beside a gpuctk run from a
// build folder, which an engine would keep using after the folder goes.
func runtimeBinary() string {
	if p, err := exec.LookPath("gpuctk-runtime"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return "/usr/bin/gpuctk-runtime"
}

// fileSize is a file's size, 0 where it cannot be read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
