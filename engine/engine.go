package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
)

// Engines are the engines Configure knows.
var Engines = []string{"containerd", "crio", "docker", "podman"}

// Default paths of the files Configure edits.
const (
	ContainerdConfig = "/etc/containerd/config.toml"
	ContainerdDropIn = "/etc/containerd/conf.d/99-gpuctk.toml"
	CrioConfig       = "/etc/crio/crio.conf"
	CrioDropIn       = "/etc/crio/crio.conf.d/99-gpuctk.conf"
	DockerConfig     = "/etc/docker/daemon.json"
)

// BackupSuffix is added to the name of a file's backup.
const BackupSuffix = ".gpuctk.bak"

// Options say what to configure. Empty paths take the engine's defaults.
type Options struct {
	// Name is the runtime's name, "nvidia" by default.
	Name string
	// Path is gpuctk-runtime's absolute path.
	Path string
	// SetAsDefault makes the runtime the engine's default.
	SetAsDefault bool
	// Config is the engine's main configuration file.
	Config string
	// DropIn is the file this package owns (containerd, CRI-O).
	DropIn string
}

// Change is one file to write, or to remove when Data is nil.
type Change struct {
	Path string
	Data []byte
	// Backup is set when Path is a file of the user's to be rewritten
	// (or written first: its backup is then empty).
	Backup bool
}

// Plan returns the changes that configure (or, with uninstall, unconfigure)
// engine; none when the host is already as asked. The note says what the
// user has to do next.
func Plan(engine string, o Options, uninstall bool) (changes []Change, note string, err error) {
	if o.Name == "" {
		o.Name = "nvidia"
	}
	if !uninstall && !filepath.IsAbs(o.Path) {
		return nil, "", fmt.Errorf("runtime path %q is not absolute", o.Path)
	}
	switch engine {
	case "containerd":
		setDefault(&o.Config, ContainerdConfig)
		setDefault(&o.DropIn, ContainerdDropIn)
		changes, err = containerd(o, uninstall)
		note = "restart containerd to load it (systemctl restart containerd)"
	case "crio":
		setDefault(&o.Config, CrioConfig)
		setDefault(&o.DropIn, CrioDropIn)
		changes, err = crio(o, uninstall)
		note = "restart CRI-O to load it (systemctl restart crio)"
	case "docker":
		setDefault(&o.Config, DockerConfig)
		changes, err = docker(o, uninstall)
		note = "restart docker to load it (systemctl restart docker)"
		if uninstall {
			note += `; features.cdi stays on: docker run --device nvidia.com/gpu=0 needs it`
		}
	case "podman":
		return nil, "podman needs no configuration: it reads the CDI specs itself (podman run --device nvidia.com/gpu=0); " +
			"for NVIDIA_VISIBLE_DEVICES, run podman with --runtime " + o.Path, nil
	default:
		return nil, "", fmt.Errorf("engine %q is not known: use containerd, crio, docker or podman", engine)
	}
	if err != nil {
		return nil, "", err
	}
	return changes, note, nil
}

func setDefault(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

// Apply makes the changes: a backup of each file of the user's first, then
// atomic writes and removals. A backup there already is the file as it was
// before the first change, and stays.
func Apply(changes []Change) error {
	for _, c := range changes {
		if c.Backup {
			if err := backup(c.Path); err != nil {
				return fmt.Errorf("back up %s: %w", c.Path, err)
			}
		}
		if c.Data == nil {
			if err := os.Remove(c.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove %s: %w", c.Path, err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", c.Path, err)
		}
		if err := atomicfile.WriteFile(c.Path, c.Data, modeOf(c.Path, 0o644)); err != nil {
			return err
		}
	}
	return nil
}

// backup copies a file to its backup, unless it has one already: an empty
// one where there is no file, so that a file gpuctk writes first is not
// taken later for the user's.
func backup(path string) error {
	if _, err := os.Lstat(path + BackupSuffix); err == nil {
		return nil
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return atomicfile.WriteFile(path+BackupSuffix, old, modeOf(path, 0o644))
}

func modeOf(path string, def fs.FileMode) fs.FileMode {
	if fi, err := os.Stat(path); err == nil {
		return fi.Mode().Perm()
	}
	return def
}

// readFile returns a file's content, nil if it does not exist.
func readFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}

// change returns the change that gives path the content data (nil:
// removed), or nothing when it has it already.
func change(path string, old, data []byte, backup bool) []Change {
	if (old == nil && data == nil) || (old != nil && data != nil && bytes.Equal(old, data)) {
		return nil
	}
	return []Change{{Path: path, Data: data, Backup: backup && (old != nil || data != nil)}}
}
