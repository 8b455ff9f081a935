package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// hookCall is the spec's one hook call, and the driver files it expects in
// the container.
type hookCall struct {
	path string
	args []string // argv, program name first
	// env is the hook's environment, the spec's: a runtime gives the
	// hook that and nothing of its own.
	env   []string
	links []string // paths the hook links, inside the container
	// libs are the driver libraries as the runtime mounts them, inside
	// the container: where each is (its own mount, or its place in the
	// driver folder's mount) -> its SONAME.
	libs map[string]string
	// files are the driver's other files in the driver folder's mount
	// (programs, firmware), inside the container.
	files []string
	// sonames are the SONAMEs of the libraries the spec mounts one by
	// one, by container path (for standIns).
	sonames map[string]string
}

// specHook reads the hook call and the driver files from a spec: mounted
// one by one, or in the driver folder, whose common groups every
// container gets (see driver.Gather).
func specHook(spec *cdispecs.Spec) (*hookCall, error) {
	if len(spec.ContainerEdits.Hooks) != 1 {
		return nil, fmt.Errorf("spec has %d common hooks, want 1", len(spec.ContainerEdits.Hooks))
	}
	h := spec.ContainerEdits.Hooks[0]
	c := &hookCall{path: h.Path, args: h.Args, env: append([]string{}, h.Env...), libs: map[string]string{}, sonames: map[string]string{}}
	common := map[string]bool{}
	for _, m := range spec.ContainerEdits.Mounts {
		common[m.ContainerPath] = true
	}
	targets := map[string]string{} // link target -> SONAME link name
	for i := 1; i+1 < len(h.Args); i++ {
		if h.Args[i] != "--link" {
			continue
		}
		target, link, _ := strings.Cut(h.Args[i+1], "::")
		c.links = append(c.links, link)
		if name := path.Base(link); strings.Contains(name, ".so.") {
			targets[target] = name
		}
	}
	sonameOf := func(p string) string {
		if soname := targets[path.Base(p)]; soname != "" {
			return soname
		}
		return path.Base(p)
	}
	for i := 1; i+1 < len(h.Args); i++ {
		target, file, _ := strings.Cut(h.Args[i+1], "::")
		if h.Args[i] != "--driver-file" || !underAny(common, target) {
			continue
		}
		c.links = append(c.links, file)
		if strings.Contains(path.Base(file), ".so") {
			c.libs[target] = sonameOf(file)
		} else {
			c.files = append(c.files, target)
		}
	}
	for _, m := range spec.ContainerEdits.Mounts {
		if !strings.Contains(path.Base(m.ContainerPath), ".so") {
			continue
		}
		c.libs[m.ContainerPath] = sonameOf(m.ContainerPath)
		c.sonames[m.ContainerPath] = sonameOf(m.ContainerPath)
	}
	return c, nil
}

// underAny reports whether p is under one of the folders (a driver
// folder's group, or a folder of the driver's mounted whole, whose files
// may be in sub-folders: lib64/, bin/).
func underAny(folders map[string]bool, p string) bool {
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		if folders[d] {
			return true
		}
	}
	return false
}

// hookRoot is a container root and a bundle pointing at it, in the state
// runc leaves them when it runs createContainer hooks: the driver's
// libraries mounted (here: written) at their paths.
type hookRoot struct {
	root, bundle, state string
	cache               []byte // the image's own ld.so.cache
	call                *hookCall
	trashed             int
}

func newHookRoot(work, name string, opts int, call *hookCall) (*hookRoot, error) {
	h := &hookRoot{root: filepath.Join(work, name, "rootfs"), bundle: filepath.Join(work, name), call: call}
	if err := fakehost.Rootfs(h.root, opts); err != nil {
		return nil, fmt.Errorf("root file system %s: %w", name, err)
	}
	place := func(p string, data []byte) error { return writeProgram(filepath.Join(h.root, p), data) }
	for l, soname := range call.libs {
		obj, err := fakehost.SharedObject(soname)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(obj)
		if err != nil {
			return nil, err
		}
		if err := place(l, data); err != nil {
			return nil, err
		}
	}
	for _, f := range call.files {
		if err := place(f, nil); err != nil {
			return nil, err
		}
	}
	var err error
	if h.cache, err = os.ReadFile(filepath.Join(h.root, "etc/ld.so.cache")); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(h.bundle, "trash"), 0o755); err != nil {
		return nil, err
	}
	// The bundle's config.json as runc leaves it for the hook: runc's
	// default spec with the hook in it (its arguments are most of the
	// bytes the hook reads there).
	spec, err := runcSpec(h.bundle)
	if err != nil {
		return nil, err
	}
	spec["root"] = map[string]any{"path": "rootfs"}
	spec["hooks"] = map[string]any{"createContainer": []any{map[string]any{"path": call.path, "args": call.args}}}
	cfg, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(h.bundle, "config.json"), cfg, 0o644); err != nil {
		return nil, err
	}
	state, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "id": "bench-" + name, "status": "creating", "pid": os.Getpid(), "bundle": h.bundle})
	h.state = filepath.Join(h.bundle, "state.json")
	return h, os.WriteFile(h.state, state, 0o644)
}

// reset returns a job's prepare function: it puts the root back as the
// image had it, with its own cache (or none, so the hook falls back to
// ldconfig) and none of the hook's links. What it takes away goes to a
// trash folder, deleted at the end, so that no deletion of the harness's
// own (the file system's work to free inodes and blocks) can be counted
// against the next run.
func (h *hookRoot) reset(withCache bool) func() ([][]string, error) {
	return func() ([][]string, error) {
		trash := func(p string) error {
			h.trashed++
			err := os.Rename(p, filepath.Join(h.bundle, "trash", strconv.Itoa(h.trashed)))
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, l := range h.call.links {
			p := filepath.Join(h.root, l)
			if st, err := os.Lstat(p); err == nil && st.Mode()&fs.ModeSymlink != 0 {
				if err := trash(p); err != nil {
					return nil, err
				}
			}
		}
		cache := filepath.Join(h.root, "etc/ld.so.cache")
		if err := trash(cache); err != nil {
			return nil, err
		}
		if !withCache {
			return nil, nil
		}
		return nil, os.WriteFile(cache, h.cache, 0o644)
	}
}

// hookJob runs the hook on this root with its spec arguments.
func (h *hookRoot) hookJob(name string) job {
	return job{name: name, stdin: h.state, env: h.call.env, cmds: [][]string{append([]string{h.call.path}, h.call.args[1:]...)}}
}

// copyFile copies the program at src to dst (see writeProgram).
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeProgram(dst, data)
}

// writeProgram writes data at dst, mode 0755, making dst's folder.
func writeProgram(dst string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}
