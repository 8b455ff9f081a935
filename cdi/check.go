package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/internal/cdientry"
	"github.com/gpuctk/gpuctk/internal/filekind"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

// MaxSpecSize caps what Check, OwnSpecs and List read of a spec file: a
// spec dir is writable by other tools, so a huge or sparse file must not
// cost more.
const MaxSpecSize = cdientry.MaxSpecSize

// Stale is one way a spec on disk differs from the spec the host gives
// now.
type Stale struct {
	Spec    string   `json:"spec"`
	Devices []string `json:"devices,omitempty"` // names it concerns; none: the spec's common edits
	What    string   `json:"what"`
}

func (s Stale) String() string {
	where := "common edits"
	switch n := len(s.Devices); {
	case n == 0:
	case n > 4:
		where = "device " + strings.Join(s.Devices[:4], ", ") + fmt.Sprintf(" and %d more", n-4)
	default:
		where = "device " + strings.Join(s.Devices, ", ")
	}
	return s.Spec + ": " + where + ": " + s.What
}

// HostFiles is where Check looks up the files a spec names, to say why one
// is no longer offered (gone, or another kind of file). The zero value
// looks nothing up: a simulated host's files are not on this machine.
type HostFiles struct {
	DriverRoot     string // where gpuctk sees the driver's files
	HostDriverRoot string // where the spec's mounts say they are; empty: DriverRoot
	DevRoot        string // where /dev is
}

// OwnSpec is a spec file found in a spec dir.
type OwnSpec struct {
	Path string
	Data []byte
}

// OwnSpecs returns the YAML and JSON files of the spec dirs that gpuctk
// wrote (their first line is Marker) and whose kind is kind, each read
// within MaxSpecSize; the others are notes saying why they are not
// judged, and the files that could not be read are errors. Missing dirs
// hold nothing.
func OwnSpecs(dirs []string, kind string) (own []OwnSpec, notes []string, errs []error) {
	own, _, notes, errs = scanSpecs(dirs, kind)
	return own, notes, errs
}

// ForeignSpecs returns the YAML spec files of the spec dirs whose kind is
// kind and that gpuctk did not write (another tool's, such as nvidia-ctk's
// nvidia.yaml): they name the same devices as gpuctk's. JSON files, which
// have no marker to tell whose they are, and files that cannot be read are
// left out.
func ForeignSpecs(dirs []string, kind string) []string {
	_, foreign, _, _ := scanSpecs(dirs, kind)
	return foreign
}

func scanSpecs(dirs []string, kind string) (own []OwnSpec, foreign, notes []string, errs []error) {
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("spec dir %s: %w", dir, err))
			continue
		}
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if ext != ".yaml" && ext != ".json" {
				continue // CDI readers skip these too
			}
			p := filepath.Join(dir, e.Name())
			data, err := ReadSpecFile(p)
			var notOurs notRegular
			switch {
			case errors.As(err, &notOurs):
				notes = append(notes, fmt.Sprintf("%s: not checked: %v; gpuctk writes regular files", p, err))
				continue
			case err != nil:
				errs = append(errs, err)
				continue
			}
			ours := bytes.HasPrefix(data, []byte(Marker+"\n"))
			if !ours && ext == ".yaml" && specKind(data) == kind {
				foreign = append(foreign, p)
			}
			switch {
			case ours:
			case ext == ".json":
				notes = append(notes, fmt.Sprintf("%s: not checked: a JSON spec has no %q line to tell gpuctk's from another tool's", p, Marker))
				continue
			default:
				notes = append(notes, fmt.Sprintf("%s: not checked: not written by gpuctk (no %q first line)", p, Marker))
				continue
			}
			if k := specKind(data); k != kind {
				notes = append(notes, fmt.Sprintf("%s: not checked: its kind is %s, the configuration's is %s", p, k, kind))
				continue
			}
			own = append(own, OwnSpec{Path: p, Data: data})
		}
	}
	return own, foreign, notes, errs
}

// specKind returns a spec's kind, empty when it does not parse.
func specKind(data []byte) string {
	s, err := cdiapi.ParseSpec(data)
	if err != nil || s == nil {
		return ""
	}
	return s.Kind
}

type notRegular struct{ error }

// ReadSpecFile reads a spec file through the gate for files others
// control (readfile.RegularNoFollow): a symbolic link, a FIFO or anything
// else not regular is a notRegular error, one over MaxSpecSize an error
// that says so.
func ReadSpecFile(path string) ([]byte, error) {
	data, err := readfile.RegularNoFollow(path, MaxSpecSize)
	var (
		nr *readfile.NotRegularError
		tl *readfile.TooLargeError
	)
	switch {
	case errors.As(err, &nr):
		return nil, notRegular{errors.New(filekind.Name(nr.Mode))}
	case errors.As(err, &tl) && tl.Size > 0:
		return nil, fmt.Errorf("spec %s: %d bytes, over the %d MiB a spec may have: remove it, or regenerate it", path, tl.Size, MaxSpecSize>>20)
	case errors.As(err, &tl):
		return nil, fmt.Errorf("spec %s: grew over %d MiB while read", path, MaxSpecSize>>20)
	case err != nil:
		return nil, fmt.Errorf("spec %s: %w", path, err)
	}
	return data, nil
}

// Check compares a spec on disk (path, data) with want, the bytes Build
// returns for the host now, and returns each difference; none when the
// spec gives containers exactly what a new one would. Formatting is not
// compared: a YAML spec and the JSON of the same edits are equal.
func Check(path string, data, want []byte, h HostFiles) ([]Stale, error) {
	if bytes.Equal(data, want) {
		return nil, nil
	}
	exp, err := cdiapi.ParseSpec(want)
	if err != nil {
		return nil, fmt.Errorf("the expected spec: %w", err)
	}
	got, err := cdiapi.ParseSpec(data)
	if err != nil || got == nil {
		if err == nil {
			err = errors.New("empty document")
		}
		return []Stale{{Spec: path, What: fmt.Sprintf("does not parse (%v)", err)}}, nil
	}
	c := checker{h: h}
	var out []Stale
	add := func(devices []string, what ...string) {
		for _, w := range what {
			out = append(out, Stale{Spec: path, Devices: devices, What: w})
		}
	}
	// Edits equal to the host's do not make a spec fresh that CDI
	// runtimes refuse to load (a device twice, a name they reject).
	if err := Validate(got); err != nil {
		add(nil, "CDI runtimes refuse it: "+err.Error())
	}
	if got.Version != exp.Version {
		add(nil, fmt.Sprintf("cdiVersion %s, gpuctk now writes %s", got.Version, exp.Version))
	}
	if got.Kind != exp.Kind {
		add(nil, fmt.Sprintf("kind %s, the configuration's is %s", got.Kind, exp.Kind))
	}

	common := c.edits(&got.ContainerEdits, &exp.ContainerEdits)
	gv, ev := driverVersion(&got.ContainerEdits), driverVersion(&exp.ContainerEdits)
	gf, ef := driverFolder(&got.ContainerEdits), driverFolder(&exp.ContainerEdits)
	switch {
	case gv != ev:
		// Every library's name carries the version: one line, not one per file.
		add(nil, fmt.Sprintf("driver %s in the spec, %s on the host (%d of the driver's files and links differ)", orNone(gv), orNone(ev), len(common)))
	case gf != ef:
		// Every file moves in or out of the folder: one line too.
		var what string
		switch {
		case ef == "":
			what = fmt.Sprintf("driver folder %s in the spec, which no longer holds the driver's files (removed, or a file reinstalled): the host's files are mounted one by one now", gf)
		case gf == "":
			what = fmt.Sprintf("driver files mounted one by one in the spec, the host has them in the driver folder %s", ef)
		default:
			what = fmt.Sprintf("driver folder %s in the spec, %s on the host (a file reinstalled)", gf, ef)
		}
		add(nil, fmt.Sprintf("%s (%d of the driver's files and links differ)", what, len(common)))
	default:
		add(nil, common...)
	}

	// Device by device, by name; names whose difference reads the same (a
	// device's names, its replicas) share one line.
	expDevs := map[string]*specs.Device{}
	for i := range exp.Devices {
		expDevs[exp.Devices[i].Name] = &exp.Devices[i]
	}
	byWhat := map[string][]string{}
	var order []string
	note := func(name, what string) {
		if byWhat[what] == nil {
			order = append(order, what)
		}
		byWhat[what] = append(byWhat[what], name)
	}
	seen := map[string]bool{}
	for i := range got.Devices {
		d := &got.Devices[i]
		seen[d.Name] = true
		e, ok := expDevs[d.Name]
		if !ok {
			note(d.Name, "in the spec, not on the host (a GPU or MIG device removed, its UUID changed, or sharing changed)")
			continue
		}
		if (gv != ev || gf != ef) && IsCapability(d.Name) {
			continue // its files carry the version too: the driver line says it
		}
		if w := c.edits(&d.ContainerEdits, &e.ContainerEdits); len(w) > 0 {
			note(d.Name, joinCapped(w, 3, "differences"))
		}
	}
	for i := range exp.Devices {
		if !seen[exp.Devices[i].Name] {
			note(exp.Devices[i].Name, "on the host, not in the spec (a GPU or MIG device added, its UUID changed, or sharing changed)")
		}
	}
	for _, w := range order {
		// "all" holds every device's nodes: it differs whenever another
		// device does, and saying so again adds nothing.
		names := byWhat[w]
		if len(names) > 1 || len(order) > 1 {
			names = slices.DeleteFunc(names, func(n string) bool { return n == "all" })
		}
		if len(names) > 0 {
			add(names, w)
		}
	}
	// A spec dir is writable by other tools: a planted spec with 100,000
	// entries must not print 100,000 lines.
	if len(out) > maxStale {
		more := len(out) - (maxStale - 1)
		out = append(out[:maxStale-1], Stale{Spec: path, What: fmt.Sprintf("and %d more differences", more)})
	}
	return out, nil
}

// maxStale is the most lines Check returns for one spec.
const maxStale = 100

// joinCapped joins items with "; ", the first max of them, counting the rest.
func joinCapped(items []string, max int, noun string) string {
	if len(items) <= max {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:max], "; ") + fmt.Sprintf("; and %d more %s", len(items)-max, noun)
}

func orNone(v string) string {
	if v == "" {
		return "(none found)"
	}
	return v
}

// driverLibrary matches the file a driver's NVML or CUDA library is
// installed as, whose name ends in the driver version.
var driverLibrary = regexp.MustCompile(`/lib(?:nvidia-ml|cuda)\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)$`)

// driverVersion returns the version the edits' driver libraries carry:
// mounted one by one, or linked into the driver folder by the hook.
func driverVersion(e *specs.ContainerEdits) string {
	for _, m := range e.Mounts {
		if v := driverLibrary.FindStringSubmatch(m.HostPath); v != nil {
			return v[1]
		}
	}
	for _, h := range e.Hooks {
		for i := 1; i < len(h.Args); i++ {
			if h.Args[i-1] != "--driver-file" {
				continue
			}
			if v := driverLibrary.FindStringSubmatch(h.Args[i]); v != nil {
				return v[1]
			}
		}
	}
	return ""
}

// driverFolder returns the driver folder the edits mount (the host
// folder holding the core sub-folder, see driver.Gather; or the driver's
// own folder mounted whole in its place), "" for none.
func driverFolder(e *specs.ContainerEdits) string {
	for _, m := range e.Mounts {
		if m.ContainerPath == path.Join(driver.FolderMounts, driver.CoreGroup) {
			if filepath.Base(m.HostPath) != driver.CoreGroup {
				return m.HostPath
			}
			return filepath.Dir(m.HostPath)
		}
	}
	return ""
}

type checker struct{ h HostFiles }

// edits returns how got differs from exp, one line per thing.
func (c checker) edits(got, exp *specs.ContainerEdits) []string {
	var out []string
	out = append(out, diffSet("environment variable", got.Env, exp.Env)...)

	expNodes := map[string]*specs.DeviceNode{}
	for _, n := range exp.DeviceNodes {
		expNodes[n.Path] = n
	}
	gotNodes := map[string]bool{}
	for _, n := range got.DeviceNodes {
		gotNodes[n.Path] = true
		e, ok := expNodes[n.Path]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("device node %s: in the spec, no longer offered%s", n.Path, c.nodeState(n)))
		case nodeString(n) != nodeString(e):
			out = append(out, fmt.Sprintf("device node %s: %s in the spec, %s on the host", n.Path, nodeString(n), nodeString(e)))
		}
	}
	for _, n := range exp.DeviceNodes {
		if !gotNodes[n.Path] {
			out = append(out, fmt.Sprintf("device node %s (%s): on the host, not in the spec", n.Path, nodeString(n)))
		}
	}

	expMounts := map[string]*specs.Mount{}
	for _, m := range exp.Mounts {
		expMounts[m.ContainerPath] = m
	}
	gotMounts := map[string]bool{}
	for _, m := range got.Mounts {
		gotMounts[m.ContainerPath] = true
		e, ok := expMounts[m.ContainerPath]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s: in the spec, no longer offered%s", fileKind(m.ContainerPath), m.ContainerPath, c.mountState(m)))
		case m.HostPath != e.HostPath:
			out = append(out, fmt.Sprintf("%s %s: from %s in the spec, %s on the host", fileKind(m.ContainerPath), m.ContainerPath, m.HostPath, e.HostPath))
		case m.Type != e.Type || !slices.Equal(m.Options, e.Options):
			out = append(out, fmt.Sprintf("%s %s: mounted %s %v in the spec, %s %v now", fileKind(m.ContainerPath), m.ContainerPath, orBind(m.Type), m.Options, orBind(e.Type), e.Options))
		}
	}
	for _, m := range exp.Mounts {
		if !gotMounts[m.ContainerPath] {
			out = append(out, fmt.Sprintf("%s %s: on the host, not in the spec", fileKind(m.ContainerPath), m.ContainerPath))
		}
	}

	hookKey := func(h *specs.Hook) string { return h.HookName + " " + h.Path }
	expHooks := map[string]*specs.Hook{}
	for _, h := range exp.Hooks {
		expHooks[hookKey(h)] = h
	}
	gotHooks := map[string]bool{}
	for _, h := range got.Hooks {
		gotHooks[hookKey(h)] = true
		e, ok := expHooks[hookKey(h)]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s hook %s: in the spec, no longer called", h.HookName, h.Path))
		case !slices.Equal(h.Args, e.Args) || !slices.Equal(h.Env, e.Env) || !equalTimeout(h.Timeout, e.Timeout):
			out = append(out, fmt.Sprintf("%s hook %s: %s", h.HookName, h.Path, argsDiff(h.Args, e.Args)))
		}
	}
	for _, h := range exp.Hooks {
		if !gotHooks[hookKey(h)] {
			out = append(out, fmt.Sprintf("%s hook %s: called now, not in the spec", h.HookName, h.Path))
		}
	}
	out = append(out, diffSet("additional group", intStrings(got.AdditionalGIDs), intStrings(exp.AdditionalGIDs))...)
	return out
}

func orBind(t string) string {
	if t == "" {
		return "bind"
	}
	return t
}

func equalTimeout(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func intStrings[T ~uint32](v []T) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprint(x)
	}
	return out
}

// diffSet says which values only one side has.
func diffSet(what string, got, exp []string) []string {
	var out []string
	for _, v := range only(got, exp) {
		out = append(out, fmt.Sprintf("%s %s: in the spec, no longer set", what, v))
	}
	for _, v := range only(exp, got) {
		out = append(out, fmt.Sprintf("%s %s: set now, not in the spec", what, v))
	}
	return out
}

// only returns the values of a that b lacks, in a's order; through a set,
// so that a spec with a huge list costs linear time.
func only(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, v := range b {
		in[v] = true
	}
	var out []string
	for _, v := range a {
		if !in[v] {
			out = append(out, v)
		}
	}
	return out
}

// argsDiff says how a hook's arguments differ, naming a few of them.
func argsDiff(got, exp []string) string {
	values := func(a, b []string) []string {
		out := slices.DeleteFunc(only(a, b), func(v string) bool { return strings.HasPrefix(v, "--") })
		sort.Strings(out)
		return out
	}
	list := func(v []string) string {
		if len(v) > 3 {
			return strings.Join(v[:3], " ") + fmt.Sprintf(" and %d more", len(v)-3)
		}
		return strings.Join(v, " ")
	}
	var parts []string
	if o := values(got, exp); len(o) > 0 {
		parts = append(parts, "only the spec's call has "+list(o))
	}
	if o := values(exp, got); len(o) > 0 {
		parts = append(parts, "only today's has "+list(o))
	}
	if len(parts) == 0 {
		return "its arguments, environment or timeout differ"
	}
	return "arguments differ: " + strings.Join(parts, "; ")
}

func nodeString(n *specs.DeviceNode) string {
	s := fmt.Sprintf("%s %d:%d", n.Type, n.Major, n.Minor)
	if n.HostPath != "" && n.HostPath != n.Path {
		s += " from " + n.HostPath
	}
	if n.Permissions != "" {
		s += " " + n.Permissions
	}
	return s
}

// fileKind names a mounted file by what it is for the user.
func fileKind(p string) string {
	switch {
	case strings.Contains(filepath.Base(p), ".so"):
		return "library"
	case strings.HasPrefix(p, "/usr/bin/") || strings.HasPrefix(p, "/bin/"):
		return "program"
	default:
		return "file"
	}
}

// nodeState says what the host has at a node's path, when HostFiles says
// where to look.
func (c checker) nodeState(n *specs.DeviceNode) string {
	if c.h.DevRoot == "" {
		return ""
	}
	p := n.HostPath
	if p == "" {
		p = filepath.Join(c.h.DevRoot, n.Path)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return " (" + p + " does not exist)"
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return " (" + p + " is not a character device)"
	}
	return fmt.Sprintf(" (%s is c %d:%d)", p, unix.Major(st.Rdev), unix.Minor(st.Rdev))
}

// mountState says what the host has at a mount's source, seen from where
// gpuctk sees the driver root.
func (c checker) mountState(m *specs.Mount) string {
	if c.h.DriverRoot == "" {
		return ""
	}
	p := m.HostPath
	if hr := c.h.HostDriverRoot; hr != "" {
		if rel, err := filepath.Rel(hr, p); err == nil && !strings.HasPrefix(rel, "..") {
			p = filepath.Join(c.h.DriverRoot, rel)
		}
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return " (" + m.HostPath + " does not exist)"
	case !st.Mode().IsRegular() && fileKind(m.ContainerPath) != "file":
		// Libraries and programs are regular files; sockets and MPS
		// folders are not.
		return " (" + m.HostPath + " is now " + filekind.Name(st.Mode()) + ")"
	}
	return ""
}
