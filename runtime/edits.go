package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// The CDI library's pkg/cdi links go-yaml, regexp and fsnotify, whose
// package init alone costs a warm create more than applying its edits.
// gpuctk-runtime applies a cache entry's edits with applyEdits, which
// gives a config what the library's ContainerEdits.Apply (v1.1.1) gives
// it, field by field and in the same order (edits_test.go compares the
// two on every device of the golden specs); only specs that gpuctk did
// not write go through the library, in a `gpuctk cdi resolve` child.

// appendEdits appends o to e as the library's ContainerEdits.Append does:
// lists concatenated, the last intelRdt wins.
func appendEdits(e, o *cdispec.ContainerEdits) {
	e.Env = append(e.Env, o.Env...)
	e.DeviceNodes = append(e.DeviceNodes, o.DeviceNodes...)
	e.NetDevices = append(e.NetDevices, o.NetDevices...)
	e.Hooks = append(e.Hooks, o.Hooks...)
	e.Mounts = append(e.Mounts, o.Mounts...)
	if o.IntelRdt != nil {
		e.IntelRdt = o.IntelRdt
	}
	e.AdditionalGIDs = append(e.AdditionalGIDs, o.AdditionalGIDs...)
}

// applyEdits applies e to spec as the library's ContainerEdits.Apply does.
func applyEdits(spec *specs.Spec, e *cdispec.ContainerEdits) error {
	if e == nil {
		return nil
	}
	if len(e.Env) > 0 {
		if spec.Process == nil {
			spec.Process = &specs.Process{}
		}
		// A variable already set is replaced in its place (its last
		// occurrence), a new one appended.
		index := make(map[string]int, len(spec.Process.Env))
		for i, v := range spec.Process.Env {
			k, _, _ := strings.Cut(v, "=")
			index[k] = i
		}
		for _, v := range e.Env {
			k, _, _ := strings.Cut(v, "=")
			if i, ok := index[k]; ok {
				spec.Process.Env[i] = v
				continue
			}
			spec.Process.Env = append(spec.Process.Env, v)
			index[k] = len(spec.Process.Env) - 1
		}
	}

	if len(e.DeviceNodes) > 0 {
		if spec.Linux == nil {
			spec.Linux = &specs.Linux{}
		}
		spec.Linux.Devices = slices.Grow(spec.Linux.Devices, len(e.DeviceNodes))
		if r := spec.Linux.Resources; r != nil {
			r.Devices = slices.Grow(r.Devices, len(e.DeviceNodes))
		}
	}
	for _, d := range e.DeviceNodes {
		dev, err := linuxDevice(*d)
		if err != nil {
			return err
		}
		if dev.UID == nil && spec.Process != nil {
			if uid := spec.Process.User.UID; uid > 0 {
				dev.UID = &uid
			}
		}
		if dev.GID == nil && spec.Process != nil {
			if gid := spec.Process.User.GID; gid > 0 {
				dev.GID = &gid
			}
		}
		// Remove the first node of that path, then replace the next one
		// or append: the library's RemoveDevice and AddDevice.
		if i := slices.IndexFunc(spec.Linux.Devices, func(x specs.LinuxDevice) bool { return x.Path == dev.Path }); i >= 0 {
			spec.Linux.Devices = slices.Delete(spec.Linux.Devices, i, i+1)
		}
		if i := slices.IndexFunc(spec.Linux.Devices, func(x specs.LinuxDevice) bool { return x.Path == dev.Path }); i >= 0 {
			spec.Linux.Devices[i] = dev
		} else {
			spec.Linux.Devices = append(spec.Linux.Devices, dev)
		}
		if dev.Type == "b" || dev.Type == "c" {
			access := d.Permissions
			switch access {
			case "":
				access = "rwm"
			case "none":
				access = ""
			}
			if spec.Linux.Resources == nil {
				spec.Linux.Resources = &specs.LinuxResources{}
			}
			major, minor := dev.Major, dev.Minor
			spec.Linux.Resources.Devices = append(spec.Linux.Resources.Devices, specs.LinuxDeviceCgroup{
				Allow: true, Type: dev.Type, Major: &major, Minor: &minor, Access: access,
			})
		}
	}

	for _, d := range e.NetDevices {
		if spec.Linux == nil {
			spec.Linux = &specs.Linux{}
		}
		if spec.Linux.NetDevices == nil {
			spec.Linux.NetDevices = map[string]specs.LinuxNetDevice{}
		}
		spec.Linux.NetDevices[d.HostInterfaceName] = specs.LinuxNetDevice{Name: d.Name}
	}

	if len(e.Mounts) > 0 {
		userns := hasUserNamespace(spec)
		spec.Mounts = slices.Grow(spec.Mounts, len(e.Mounts))
		for _, m := range e.Mounts {
			if i := slices.IndexFunc(spec.Mounts, func(x specs.Mount) bool { return x.Destination == m.ContainerPath }); i >= 0 {
				spec.Mounts = slices.Delete(spec.Mounts, i, i+1)
			}
			om := specs.Mount{Source: m.HostPath, Destination: m.ContainerPath, Options: m.Options, Type: m.Type}
			if userns {
				om.Options = idmapOptions(om.Type, om.Options)
			}
			spec.Mounts = append(spec.Mounts, om)
		}
		spec.Mounts = sortMounts(spec.Mounts)
	}

	for _, h := range e.Hooks {
		oh := specs.Hook{Path: h.Path, Args: h.Args, Env: h.Env, Timeout: h.Timeout}
		if spec.Hooks == nil && slices.Contains(hookNames, h.HookName) {
			spec.Hooks = &specs.Hooks{}
		}
		switch h.HookName {
		case "prestart":
			spec.Hooks.Prestart = append(spec.Hooks.Prestart, oh) //nolint:staticcheck // CDI still takes prestart hooks.
		case "poststart":
			spec.Hooks.Poststart = append(spec.Hooks.Poststart, oh)
		case "poststop":
			spec.Hooks.Poststop = append(spec.Hooks.Poststop, oh)
		case "createRuntime":
			spec.Hooks.CreateRuntime = append(spec.Hooks.CreateRuntime, oh)
		case "createContainer":
			spec.Hooks.CreateContainer = append(spec.Hooks.CreateContainer, oh)
		case "startContainer":
			spec.Hooks.StartContainer = append(spec.Hooks.StartContainer, oh)
		default:
			return fmt.Errorf("unknown hook name %q", h.HookName)
		}
	}

	if r := e.IntelRdt; r != nil {
		if spec.Linux == nil {
			spec.Linux = &specs.Linux{}
		}
		spec.Linux.IntelRdt = &specs.LinuxIntelRdt{
			ClosID: r.ClosID, L3CacheSchema: r.L3CacheSchema, MemBwSchema: r.MemBwSchema,
			Schemata: r.Schemata, EnableMonitoring: r.EnableMonitoring,
		}
	}

	for _, gid := range e.AdditionalGIDs {
		if gid == 0 {
			continue
		}
		if spec.Process == nil {
			spec.Process = &specs.Process{}
		}
		if !slices.Contains(spec.Process.User.AdditionalGids, gid) {
			spec.Process.User.AdditionalGids = append(spec.Process.User.AdditionalGids, gid)
		}
	}
	return nil
}

// hookNames are the OCI hooks a CDI spec may name.
var hookNames = []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}

// linuxDevice is the library's fillMissingInfo and toOCI of a device
// node: what the spec leaves out (type, major, minor, the file mode) is
// read from the host's node, which must then be one.
func linuxDevice(d cdispec.DeviceNode) (specs.LinuxDevice, error) {
	minimal := d.Type != "" && (d.Major != 0 || d.Type == "p")
	if d.HostPath == "" {
		d.HostPath = d.Path
	}
	typ, major, minor, mode, err := hostDevice(d.HostPath)
	switch {
	case err != nil && !minimal:
		return specs.LinuxDevice{}, fmt.Errorf("failed to stat CDI host device %q: %w", d.HostPath, err)
	case err != nil:
	default:
		if d.FileMode == nil {
			d.FileMode = &mode
		}
		if minimal {
			break
		}
		if d.Type == "" {
			d.Type = typ
		}
		if d.Type != typ {
			return specs.LinuxDevice{}, fmt.Errorf("CDI device (%q, %q), host type mismatch (%s, %s)", d.Path, d.HostPath, d.Type, typ)
		}
		if d.Type != "p" && d.Major == 0 {
			d.Major, d.Minor = major, minor
		}
	}
	return specs.LinuxDevice{Path: d.Path, Type: d.Type, Major: d.Major, Minor: d.Minor, FileMode: d.FileMode, UID: d.UID, GID: d.GID}, nil
}

// hostDevice reads the type, numbers and permission bits of the device
// node at path, without following a last link.
func hostDevice(path string) (typ string, major, minor int64, mode os.FileMode, err error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return "", 0, 0, 0, err // unwrapped, as the library words it
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		typ = "b"
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFIFO:
		typ = "p"
	default:
		return "", 0, 0, 0, errors.New("not a device node")
	}
	dev := uint64(st.Rdev) //nolint:unconvert // uint32 on some architectures
	return typ, int64(unix.Major(dev)), int64(unix.Minor(dev)), os.FileMode(st.Mode &^ unix.S_IFMT), nil
}

// idmapOptions adds the idmap option a bind mount needs in a user
// namespace, as the library does: idmap for bind, ridmap for rbind, none
// when one is there already.
func idmapOptions(typ string, options []string) []string {
	option := ""
	if typ == "bind" {
		option = "idmap"
	}
	for _, o := range options {
		switch o {
		case "idmap", "ridmap":
			return options
		case "bind":
			option = "idmap"
		case "rbind":
			option = "ridmap"
		}
	}
	if option == "" {
		return options
	}
	// A copy: the options may be shared with other devices' mounts.
	return append(slices.Clip(options), option)
}

func hasUserNamespace(spec *specs.Spec) bool {
	if spec.Linux == nil {
		return false
	}
	return slices.ContainsFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.UserNamespace })
}

// sortMounts orders mounts parents before what is mounted below them, by
// the number of path elements, stably (the library's, docker's and
// CRI-O's order). Each depth is computed once: a comparison sort that
// cleaned both paths on every comparison took a fifth of applyEdits.
func sortMounts(mounts []specs.Mount) []specs.Mount {
	depth := make([]int, len(mounts))
	sorted := true
	for i := range mounts {
		depth[i] = strings.Count(filepath.Clean(mounts[i].Destination), "/")
		sorted = sorted && (i == 0 || depth[i] >= depth[i-1])
	}
	if sorted {
		return mounts
	}
	order := make([]int, len(mounts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return depth[a] - depth[b] })
	out := make([]specs.Mount, len(mounts))
	for i, j := range order {
		out[i] = mounts[j]
	}
	return out
}

// validateEdits checks edits as the library's ContainerEdits.Validate
// does; gpuctkSpec leaves a spec that fails it to the library, which
// says what is wrong.
func validateEdits(e *cdispec.ContainerEdits) error {
	if err := validateEnv(e.Env); err != nil {
		return err
	}
	for _, d := range e.DeviceNodes {
		switch {
		case d.Path == "":
			return errors.New("invalid (empty) device path")
		case !slices.Contains([]string{"", "b", "c", "u", "p"}, d.Type):
			return fmt.Errorf("device %q: invalid type %q", d.Path, d.Type)
		case d.Permissions != "none" && strings.Trim(d.Permissions, "rwm") != "":
			return fmt.Errorf("device %q: invalid permissions %q", d.Path, d.Permissions)
		}
	}
	for _, h := range e.Hooks {
		if !slices.Contains(hookNames, h.HookName) || h.Path == "" {
			return fmt.Errorf("invalid hook %q", h.HookName)
		}
		if err := validateEnv(h.Env); err != nil {
			return err
		}
	}
	for _, m := range e.Mounts {
		if m.HostPath == "" || m.ContainerPath == "" {
			return errors.New("invalid mount, empty path")
		}
	}
	if r := e.IntelRdt; r != nil {
		switch c := r.ClosID; {
		case c == "/":
		case len(c) >= 4096, c == ".", c == "..", strings.ContainsAny(c, "/\n"):
			return errors.New("invalid ClosID")
		}
	}
	hosts, names := map[string]bool{}, map[string]bool{}
	for _, d := range e.NetDevices {
		if d.HostInterfaceName == "" || d.Name == "" || hosts[d.HostInterfaceName] || names[d.Name] {
			return fmt.Errorf("invalid linux net device %q", d.HostInterfaceName)
		}
		hosts[d.HostInterfaceName], names[d.Name] = true, true
	}
	return nil
}

func validateEnv(env []string) error {
	for _, v := range env {
		if strings.IndexByte(v, '=') <= 0 {
			return fmt.Errorf("invalid environment variable %q", v)
		}
	}
	return nil
}
