package engine

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/gpuctk/gpuctk/internal/tomlerr"
)

const (
	runcShim       = "io.containerd.runc.v2"
	cdiAnnotations = "cdi.k8s.io/*"
)

// Markers of our edits to containerd's main config, so that uninstall
// takes back exactly what configure put there.
const (
	markLine  = " # added by gpuctk runtime configure"
	markEntry = " # gpuctk runtime configure added "
)

func containerd(o Options, uninstall bool) ([]Change, error) {
	mainData, err := readFile(o.Config)
	if err != nil {
		return nil, err
	}
	var main map[string]any
	if err := toml.Unmarshal(mainData, &main); err != nil {
		return nil, fmt.Errorf("containerd config %s: %w", o.Config, tomlerr.Line(err))
	}
	oldDropIn, err := readFile(o.DropIn)
	if err != nil {
		return nil, err
	}
	glob := filepath.Join(filepath.Dir(o.DropIn), "*"+filepath.Ext(o.DropIn))
	if uninstall {
		newMain, err := removeImport(mainData, glob)
		if err != nil {
			return nil, fmt.Errorf("containerd config %s: %w", o.Config, err)
		}
		if newMain == nil && mainData != nil {
			newMain = []byte{} // an empty config stays, empty
		}
		if mainData != nil && bytes.Equal(newMain, createdMain(glob)) {
			newMain = nil
		}
		return slices.Concat(change(o.DropIn, oldDropIn, nil, false), change(o.Config, mainData, newMain, true)), nil
	}

	version := 2
	if mainData != nil && tomlInt(main["version"]) <= 1 {
		// containerd 1.7 merges files before it looks at versions: a
		// version 2 drop-in would turn a version 1 main config into an
		// unreadable version 2 one. containerd 2.x migrates either.
		version = 1
	}
	dropIn, err := containerdDropIn(o, main, version)
	if err != nil {
		return nil, err
	}
	newMain := mainData
	switch {
	case mainData == nil:
		newMain = createdMain(glob)
	case !imports(main, o.Config, o.DropIn):
		if newMain, err = addImport(mainData, glob); err != nil {
			return nil, fmt.Errorf("containerd config %s: %w: add imports = [%q] to it by hand", o.Config, err, glob)
		}
	}
	return slices.Concat(change(o.DropIn, oldDropIn, dropIn, false), change(o.Config, mainData, newMain, mainData != nil)), nil
}

// containerdDropIn writes the drop-in: the runtime, a copy of the default
// runc runtime with gpuctk-runtime as its binary, and the default runtime;
// in a config version containerd 1.7 reads, inside a copy of the main
// config's whole CRI section.
func containerdDropIn(o Options, main map[string]any, version int) ([]byte, error) {
	ctrd := table(main, append(criPath(tomlInt(main["version"])), "containerd")...)
	runtimes := table(ctrd, "runtimes")
	base := map[string]any{}
	if def, _ := ctrd["default_runtime_name"].(string); def != "" && def != o.Name && isRunc(runtimes, def) {
		base = table(runtimes, def)
	} else if isRunc(runtimes, "runc") {
		base = table(runtimes, "runc")
	}
	rt := deepCopy(base)
	rt["runtime_type"] = runcShim
	// CRI hands the runtime only the annotations a runtime allows. Device
	// plugins ask for CDI devices by annotation, which containerd 1.7 does
	// not resolve itself without enable_cdi: let them through to
	// gpuctk-runtime. (containerd 2.x resolves them, and the runtime then
	// sees NVIDIA_VISIBLE_DEVICES=void and leaves them be.)
	anns, _ := rt["container_annotations"].([]any)
	if !slices.Contains(anns, any(cdiAnnotations)) {
		rt["container_annotations"] = append(slices.Clip(anns), cdiAnnotations)
	}
	opts, _ := rt["options"].(map[string]any)
	if opts == nil {
		opts = map[string]any{}
	}
	opts["BinaryName"] = o.Path
	rt["options"] = opts

	cri := criPath(version)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by `gpuctk runtime configure --runtime containerd`: containers of the runtime %q\n", o.Name)
	fmt.Fprintf(&b, "# get the GPUs they ask for through gpuctk-runtime. `--uninstall` removes this file.\n")
	fmt.Fprintf(&b, "version = %d\n", version)
	if mainVersion := tomlInt(main["version"]); version <= 2 && mainVersion <= 2 {
		// containerd 1.7 merges imports a whole plugin section at a time:
		// the drop-in's CRI section replaces the main config's. Carry all
		// of it, with the runtime added. (containerd 2.x merges deeply,
		// where the copy changes nothing.)
		full := deepCopy(table(main, criPath(mainVersion)...))
		ctrd := subTable(full, "containerd")
		runtimes, had := ctrd["runtimes"].(map[string]any)
		if !had {
			// Without runtimes of its own, the main config has
			// containerd's default runc, which ours would replace.
			runtimes = map[string]any{}
			ctrd["runtimes"] = runtimes
			if o.Name != "runc" {
				runtimes["runc"] = map[string]any{"runtime_type": runcShim}
			}
		}
		runtimes[o.Name] = rt
		if o.SetAsDefault {
			ctrd["default_runtime_name"] = o.Name
		}
		b.WriteString("\n")
		if err := writeTable(&b, cri, full, ""); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	if o.SetAsDefault {
		b.WriteString("\n")
		if err := writeTable(&b, append(cri[:len(cri):len(cri)], "containerd"), map[string]any{"default_runtime_name": o.Name}, ""); err != nil {
			return nil, err
		}
	}
	b.WriteString("\n")
	if err := writeTable(&b, append(cri[:len(cri):len(cri)], "containerd", "runtimes", o.Name), rt, ""); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// subTable returns the table under key k of m, adding an empty one where
// there is none.
func subTable(m map[string]any, k string) map[string]any {
	t, ok := m[k].(map[string]any)
	if !ok {
		t = map[string]any{}
		m[k] = t
	}
	return t
}

// criPath is where a config of the version keeps CRI's runtimes.
func criPath(version int) []string {
	switch {
	case version <= 1:
		return []string{"plugins", "cri"}
	case version == 2:
		return []string{"plugins", "io.containerd.grpc.v1.cri"}
	default:
		return []string{"plugins", "io.containerd.cri.v1.runtime"}
	}
}

func isRunc(runtimes map[string]any, name string) bool {
	rt, ok := runtimes[name].(map[string]any)
	if !ok {
		return false
	}
	typ, _ := rt["runtime_type"].(string)
	return typ == "" || typ == runcShim
}

// imports reports whether the main config imports the drop-in.
func imports(main map[string]any, config, dropIn string) bool {
	list, _ := main["imports"].([]any)
	for _, v := range list {
		s, _ := v.(string)
		if s == "" {
			continue
		}
		if !filepath.IsAbs(s) {
			s = filepath.Join(filepath.Dir(config), s)
		}
		if ok, _ := filepath.Match(filepath.Clean(s), dropIn); ok {
			return true
		}
	}
	return false
}

// createdMain is the main config written where there was none.
func createdMain(glob string) []byte {
	return []byte("# Written by `gpuctk runtime configure --runtime containerd`: containerd's defaults\n" +
		"# and the drop-ins of " + filepath.Dir(glob) + ".\nversion = 2\nimports = [" + strconv.Quote(glob) + "]\n")
}

// addImport adds glob to the top-level imports of a config, changing
// nothing else: into the array if there is one, else as a line after
// version (or first).
func addImport(data []byte, glob string) ([]byte, error) {
	kv, version, err := topLevel(data)
	if err != nil {
		return nil, err
	}
	if kv == nil {
		at := leadingComments(data)
		if version != nil {
			at = lineEnd(data, version.end)
			if at < len(data) {
				at++
			} else {
				data = append(slices.Clip(data), '\n')
				at = len(data)
			}
		}
		line := "imports = [" + strconv.Quote(glob) + "]" + markLine + "\n"
		return slices.Concat(data[:at], []byte(line), data[at:]), nil
	}
	open := bytes.IndexByte(data[kv.start:kv.end], '[')
	if open < 0 || !kv.array {
		return nil, fmt.Errorf("imports is not an array")
	}
	open += kv.start + 1
	entry := strconv.Quote(glob)
	if !kv.empty {
		entry += ","
		if open < len(data) && data[open] != '\n' && data[open] != '\r' {
			entry += " "
		}
	}
	end := lineEnd(data, kv.end)
	return slices.Concat(data[:open], []byte(entry), data[open:end], []byte(markEntry+strconv.Quote(glob)), data[end:]), nil
}

// removeImport takes back what addImport did.
func removeImport(data []byte, glob string) ([]byte, error) {
	if data == nil {
		return nil, nil
	}
	if i := bytes.Index(data, []byte(markLine)); i >= 0 {
		start := bytes.LastIndexByte(data[:i], '\n') + 1
		end := min(lineEnd(data, i)+1, len(data))
		return slices.Concat(data[:start], data[end:]), nil
	}
	mark := []byte(markEntry + strconv.Quote(glob))
	i := bytes.Index(data, mark)
	if i < 0 {
		return data, nil
	}
	data = slices.Concat(data[:i], data[i+len(mark):])
	kv, _, err := topLevel(data)
	if err != nil || kv == nil {
		return data, err
	}
	open := kv.start + bytes.IndexByte(data[kv.start:kv.end], '[') + 1
	for _, entry := range []string{strconv.Quote(glob) + ", ", strconv.Quote(glob) + ",", strconv.Quote(glob)} {
		if bytes.HasPrefix(data[open:], []byte(entry)) {
			return slices.Concat(data[:open], data[open+len(entry):]), nil
		}
	}
	return data, nil
}

// keyValue is where a top-level key-value sits in a TOML document.
type keyValue struct {
	start, end int // from the key to the end of the value
	array      bool
	empty      bool // an array without elements
}

// topLevel finds the top-level imports and version key-values.
func topLevel(data []byte) (imports, version *keyValue, err error) {
	p := &unstable.Parser{}
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind == unstable.Table || e.Kind == unstable.ArrayTable {
			break
		}
		if e.Kind != unstable.KeyValue {
			continue
		}
		k := e.Key()
		if !k.Next() || !k.IsLast() {
			continue
		}
		kv := &keyValue{start: int(e.Raw.Offset), end: int(e.Raw.Offset + e.Raw.Length)}
		kv.array = e.Value().Kind == unstable.Array
		kv.empty = kv.array && e.Value().Child() == nil
		switch string(k.Node().Data) {
		case "imports":
			imports = kv
		case "version":
			version = kv
		}
	}
	return imports, version, p.Error()
}

// leadingComments returns the length of the comment and blank lines that
// open a document.
func leadingComments(data []byte) int {
	at := 0
	for at < len(data) {
		end := lineEnd(data, at)
		if line := bytes.TrimSpace(data[at:end]); len(line) > 0 && line[0] != '#' {
			break
		}
		if end == len(data) {
			return at
		}
		at = end + 1
	}
	return at
}

func lineEnd(data []byte, from int) int {
	if i := bytes.IndexByte(data[from:], '\n'); i >= 0 {
		return from + i
	}
	return len(data)
}

// writeTable writes a TOML table and its sub-tables under a header path,
// the way containerd's own configs look.
func writeTable(b *bytes.Buffer, path []string, t map[string]any, indent string) error {
	b.WriteString(indent + "[" + tomlKey(path) + "]\n")
	keys := slices.Sorted(maps.Keys(t))
	var subs []string
	for _, k := range keys {
		if _, ok := t[k].(map[string]any); ok {
			subs = append(subs, k)
			continue
		}
		line, err := toml.Marshal(map[string]any{k: t[k]})
		if err != nil {
			return fmt.Errorf("%s.%s: %w", tomlKey(path), k, err)
		}
		b.WriteString(indent + "  " + string(line))
	}
	for _, k := range subs {
		b.WriteString("\n")
		if err := writeTable(b, append(path[:len(path):len(path)], k), t[k].(map[string]any), indent+"  "); err != nil {
			return err
		}
	}
	return nil
}

func tomlKey(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = p
		if p == "" || strings.ContainsFunc(p, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
		}) {
			parts[i] = strconv.Quote(p)
		}
	}
	return strings.Join(parts, ".")
}

// table returns the table at a path of keys, or an empty one.
func table(m map[string]any, path ...string) map[string]any {
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			return map[string]any{}
		}
		m = next
	}
	return m
}

func tomlInt(v any) int {
	if n, ok := v.(int64); ok {
		return int(n)
	}
	return 0
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if t, ok := v.(map[string]any); ok {
			v = deepCopy(t)
		}
		out[k] = v
	}
	return out
}
