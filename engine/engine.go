package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/internal/filekind"
	"github.com/gpuctk/gpuctk/internal/readfile"
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
	// CDISpecDirs, when set, turns on containerd's own CDI support and
	// has it read these folders: enable_cdi and cdi_spec_dirs of the CRI
	// plugin, which containerd 1.7 needs (off by default there) for the
	// device plugin's cdi-cri and cdi-annotations; containerd 2.x has CDI
	// always on and reads cdi_spec_dirs. containerd only.
	CDISpecDirs []string
}

// DefaultCDISpecDirs are the folders containerd and the CDI library read
// specs from by default.
var DefaultCDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// Change is one file to write, or to remove when Data is nil.
type Change struct {
	Path string
	Data []byte
	// Backup is set when Path is a file of the user's to be rewritten
	// (or written first: its backup is then empty).
	Backup bool
	// EmptyDir marks Path as a folder to remove if it is empty (one that
	// configure may have made).
	EmptyDir bool
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
	if o.CDISpecDirs != nil && engine != "containerd" {
		return nil, "", fmt.Errorf("--cdi is for containerd: CRI-O and podman read CDI specs without it, and docker's configure turns on features.cdi (--runtime %s)", engine)
	}
	switch engine {
	case "containerd":
		setDefault(&o.Config, ContainerdConfig)
		setDefault(&o.DropIn, ContainerdDropIn)
	case "crio":
		setDefault(&o.Config, CrioConfig)
		setDefault(&o.DropIn, CrioDropIn)
	case "docker":
		setDefault(&o.Config, DockerConfig)
	}
	for _, p := range []*string{&o.Config, &o.DropIn} {
		if *p, err = resolve(*p); err != nil {
			return nil, "", err
		}
	}
	switch engine {
	case "containerd":
		changes, err = containerd(o, uninstall)
		note = "restart containerd to load it (systemctl restart containerd)"
	case "crio":
		var missing []string
		changes, missing, err = crio(o, uninstall)
		note = "restart CRI-O to load it (systemctl restart crio)"
		if len(missing) > 0 {
			note = fmt.Sprintf("the default runtime has no %s in %s or its drop-ins: add %s to [crio.runtime.runtimes.%s] in %s as your default runtime has them, then %s",
				strings.Join(missing, " or "), o.Config, strings.Join(missing, " and "), o.Name, o.DropIn, note)
		}
	case "docker":
		if o.DropIn != "" {
			return nil, "", fmt.Errorf("docker reads no drop-in files: --drop-in is for containerd and CRI-O; docker's runtime goes in --config (default %s)", DockerConfig)
		}
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
	if uninstall {
		if changes, err = cleanup(changes, o); err != nil {
			return nil, "", err
		}
	}
	return changes, note, nil
}

// cleanup adds to an uninstall what configure left besides its edits: the
// backup of a file that the uninstall gives back exactly as it was (or
// removes, having made it), and the folders it made, if empty.
func cleanup(changes []Change, o Options) ([]Change, error) {
	for _, path := range []string{o.Config, o.DropIn} {
		if path == "" {
			continue
		}
		bak, err := readFile(path + BackupSuffix)
		if err != nil || bak == nil {
			continue
		}
		final, err := readFile(path)
		if err != nil {
			return nil, err
		}
		for _, c := range changes {
			if c.Path == path {
				final = c.Data
			}
		}
		if (final == nil && len(bak) == 0) || (final != nil && bytes.Equal(final, bak)) {
			changes = append(changes, Change{Path: path + BackupSuffix})
		}
	}
	for _, path := range []string{o.DropIn, o.Config} {
		if dir := filepath.Dir(path); path != "" && wouldBeEmpty(dir, changes) {
			changes = append(changes, Change{Path: dir, EmptyDir: true})
		}
	}
	return changes, nil
}

// wouldBeEmpty reports whether dir exists and holds nothing once changes
// are made.
func wouldBeEmpty(dir string, changes []Change) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		gone := false
		for _, c := range changes {
			gone = gone || (c.Path == p && c.Data == nil)
		}
		if !gone {
			return false
		}
	}
	return true
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
		if c.EmptyDir {
			// A folder with anything in it is someone's: left alone.
			if err := os.Remove(c.Path); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
				return fmt.Errorf("remove %s: %w", c.Path, err)
			}
			continue
		}
		// A file removed is one gpuctk made and nobody changed (see
		// Plan): nothing of the user's to keep.
		if c.Backup && c.Data != nil {
			if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err != nil {
				return fmt.Errorf("write %s: %w", c.Path, err)
			}
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
		if err := writeKeepingOwner(c.Path, c.Data, modeOf(c.Path, 0o644)); err != nil {
			return err
		}
	}
	return nil
}

// writeKeepingOwner replaces path atomically, keeping its owner where
// that is not gpuctk's user: a config of another user's (a rootless
// engine's) stays theirs to read and edit.
func writeKeepingOwner(path string, data []byte, mode os.FileMode) error {
	if fi, err := os.Stat(path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
			return atomicfile.WriteFileAs(path, data, mode, atomicfile.Owner{UID: int(st.Uid), GID: int(st.Gid)})
		}
	}
	return atomicfile.WriteFile(path, data, mode)
}

// backup copies a file to its backup, unless it has one already: an empty
// one where there is no file, so that a file gpuctk writes first is not
// taken later for the user's.
func backup(path string) error {
	if _, err := os.Lstat(path + BackupSuffix); err == nil {
		return nil
	}
	old, err := readfile.Limited(path, maxConfigSize)
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

// maxConfigSize bounds a runtime's config file: containerd's, with every
// plugin's section, is some 20 KiB.
const maxConfigSize = 4 << 20

// resolve returns the file that path names: path itself, or where its
// symbolic links lead, so that a config kept elsewhere and linked into
// /etc is edited where it is and the link stays. A path that exists must
// be a regular file: a device (--config /dev/null) would otherwise be
// renamed over by the atomic write, a FIFO would hang the read.
func resolve(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, nil
	}
	if err != nil {
		return "", err
	}
	target := path
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return "", fmt.Errorf("%s is a symbolic link that leads nowhere (%v): fix or remove it", path, err)
		}
		if fi, err = os.Stat(target); err != nil {
			return "", err
		}
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is %s, not a config file: name the runtime's config file", target, filekind.Name(fi.Mode()))
	}
	return target, nil
}

// readFile returns a file's content, nil if it does not exist.
func readFile(path string) ([]byte, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a config file: move it out of the way", path, filekind.Name(fi.Mode()))
	}
	data, err := readfile.Limited(path, maxConfigSize)
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
