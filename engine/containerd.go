package engine

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

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

// Markers of the block and lines that configure puts into a main config of
// version 1 or 2, so that uninstall (and the next configure) takes back
// exactly those bytes and nothing the user wrote.
const (
	blockBegin = "# >>> gpuctk runtime configure: `gpuctk runtime configure --uninstall` removes this block"
	blockEnd   = "# <<< gpuctk runtime configure"
	// noNewline ends the begin line of a block that configure put after a
	// last line with no newline, for uninstall to give that back too.
	noNewline    = " (the line before this block had no newline)"
	markDefault  = " # gpuctk runtime configure set the default"
	markSet      = " # gpuctk runtime configure set this"
	markReplaced = " # gpuctk runtime configure replaced: "
	createdLine  = "# Written by `gpuctk runtime configure --runtime containerd`; `--uninstall` removes it.\n"
)

// containerd configures containerd. containerd 1.7 merges an imported file
// a whole plugin section at a time: a drop-in's CRI table replaces the
// main config's, and with it every later edit there (the sandbox image, a
// registry mirror). containerd 2.x merges deeply. So a main config of
// version 1 or 2 (read by 1.7, and migrated by 2.x) gets the runtime in a
// marked block of its own, and one of version 3 (2.x only) a drop-in with
// only the runtime. The version of the file decides, not the installed
// binary: a host upgraded from 1.7 to 2.x keeps a working config, and
// configure needs no containerd on PATH.
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
	// Ours taken out first: what configure computes from what is left
	// is the same each run, and uninstall leaves the user's bytes.
	bare, at, err := removeOurs(mainData, glob)
	if err != nil {
		return nil, fmt.Errorf("containerd config %s: %w", o.Config, err)
	}
	if uninstall {
		return slices.Concat(change(o.DropIn, oldDropIn, nil, false), change(o.Config, mainData, bare, true)), nil
	}
	if tomlInt(main["version"]) <= 2 {
		// containerd 1.7 puts an imported file's CRI section in place of
		// the main config's, and with it the block: the runtime would
		// not be there.
		if over, err := criImports(o, main, o.Config, criPath(tomlInt(main["version"]))[1], newImportWalk(o.Config)); err != nil || over != "" {
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("containerd config %s imports %s, whose %s section containerd 1.7 puts in place of the config's, with the runtime gpuctk would add there: add the runtime %q to %s by hand, or move that section into %s",
				o.Config, over, tomlKey(criPath(tomlInt(main["version"]))), o.Name, over, o.Config)
		}
		newMain, err := inPlace(o, bare, at)
		if err != nil {
			return nil, err
		}
		return slices.Concat(change(o.DropIn, oldDropIn, nil, false), change(o.Config, mainData, newMain, true)), nil
	}

	dropIn, err := containerdDropIn(o, main, tomlInt(main["version"]))
	if err != nil {
		return nil, err
	}
	newMain := mainData
	if !imports(main, o.Config, o.DropIn) {
		if newMain, err = addImport(mainData, glob); err != nil {
			return nil, fmt.Errorf("containerd config %s: %w: add imports = [%q] to it by hand", o.Config, err, glob)
		}
	}
	return slices.Concat(change(o.DropIn, oldDropIn, dropIn, false), change(o.Config, mainData, newMain, true)), nil
}

// Bounds of an import walk: containerd's own configs import one level,
// rarely two.
const (
	maxImportDepth = 16
	maxImports     = 1000
)

// fileID is a file's identity: a folder link makes one file many paths.
type fileID struct{ dev, ino uint64 }

func identify(path string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

// importWalk is what criImports has seen: every file read, by identity,
// so that each is read once whatever the links, and the chain of imports
// that led to the current one, so that a loop is named.
type importWalk struct {
	seen  map[fileID]bool
	chain map[fileID]string
	depth int
}

func newImportWalk(config string) *importWalk {
	w := &importWalk{seen: map[fileID]bool{}, chain: map[fileID]string{}}
	if id, ok := identify(config); ok {
		w.seen[id], w.chain[id] = true, config
	}
	return w
}

// criImports returns the last file that a config of version 1 or 2
// imports (directly or through another import, as containerd resolves
// them) that has a CRI section of its own; "" when none does. The drop-in,
// which configure removes for such a config, does not count. Imports that
// loop (through a folder link, say) are one line naming the loop; more
// than maxImports files or maxImportDepth levels are refused.
func criImports(o Options, cfg map[string]any, path, key string, w *importWalk) (string, error) {
	list, _ := cfg["imports"].([]any)
	found := ""
	for _, v := range list {
		s, _ := v.(string)
		if s == "" {
			continue
		}
		if !filepath.IsAbs(s) {
			s = filepath.Join(filepath.Dir(path), s)
		}
		files := []string{s}
		if strings.Contains(s, "*") {
			var err error
			if files, err = filepath.Glob(s); err != nil {
				return "", fmt.Errorf("containerd config %s: import %q: %w", path, s, err)
			}
		}
		for _, f := range files {
			id, ok := identify(f)
			if !ok || f == o.DropIn {
				continue // containerd says what is wrong with a missing one
			}
			// By the same path (a glob matching the config itself),
			// containerd skips it too; by another, it would go round
			// until the kernel's limit of 40 links in a path.
			if first, ok := w.chain[id]; ok && first != f {
				return "", fmt.Errorf("containerd config %s imports %s, which is %s again: its imports loop (through a link?); remove the import", path, f, first)
			}
			if w.seen[id] {
				continue
			}
			w.seen[id] = true
			if len(w.seen) > maxImports || w.depth >= maxImportDepth {
				return "", fmt.Errorf("containerd config %s: importing %s goes past %d files or %d levels of imports: check its imports", o.Config, f, maxImports, maxImportDepth)
			}
			data, err := readFile(f)
			if err != nil || data == nil {
				continue // containerd says what is wrong with it
			}
			var m map[string]any
			if err := toml.Unmarshal(data, &m); err != nil {
				return "", fmt.Errorf("containerd config %s, imported by %s: %w", f, path, tomlerr.Line(err))
			}
			if _, ok := table(m, "plugins")[key]; ok {
				found = f
			}
			w.chain[id] = f
			w.depth++
			next, err := criImports(o, m, f, key, w)
			w.depth--
			delete(w.chain, id)
			if err != nil {
				return "", err
			}
			if next != "" {
				found = next
			}
		}
	}
	return found, nil
}

// removeOurs takes out of a main config what configure put there: the
// block, the default runtime line (giving back the line it replaced), the
// import of the drop-in; a config that configure wrote whole goes (nil).
// at is where the block was (-1: nowhere), for the next configure to put
// it back there: the user may have written after it.
func removeOurs(data []byte, glob string) (bare []byte, at int, err error) {
	if data == nil {
		return nil, -1, nil
	}
	head, tail, at := data, []byte{}, -1
	if i := bytes.Index(data, []byte(blockBegin)); i >= 0 {
		j := bytes.Index(data[i:], []byte(blockEnd+"\n"))
		if j < 0 {
			return nil, -1, fmt.Errorf("the block of gpuctk's that begins at byte %d has no end line %q: remove the block by hand", i, blockEnd)
		}
		start := i
		if start > 0 && data[start-1] == '\n' && (start < 2 || data[start-2] == '\n') {
			start-- // the blank line configure put before it
		}
		if bytes.HasPrefix(data[i+len(blockBegin):], []byte(noNewline+"\n")) && start > 0 && data[start-1] == '\n' {
			start-- // the newline configure put after the last line
		}
		head, tail = data[:start], data[i+j+len(blockEnd)+1:]
	}
	head, err = removeImport(unmark(head), glob)
	if err != nil {
		return nil, -1, err
	}
	if bytes.Contains(data, []byte(blockBegin)) {
		at = len(head)
	}
	bare = append(append([]byte{}, head...), unmark(tail)...) // an empty config stays, empty
	if bytes.Equal(bare, []byte(createdLine+"version = 2\n")) || bytes.Equal(bare, createdMain(glob)) {
		return nil, -1, nil
	}
	return bare, at, nil
}

// unmark takes out the default runtime lines of configure's, giving back
// the lines they replaced.
func unmark(data []byte) []byte {
	out := make([]byte, 0, len(data)) // an empty config stays, empty
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		switch {
		case bytes.Contains(line, []byte(markDefault)), bytes.Contains(line, []byte(markSet)):
			continue
		case bytes.Contains(line, []byte(markReplaced)):
			i := bytes.Index(line, []byte(markReplaced))
			line = line[i+len(markReplaced):]
		}
		out = append(out, line...)
	}
	return out
}

// inPlace adds the runtime to a main config of version 1 or 2 (none: a new
// one of version 2): a marked block at its end (or at, where it was), and
// with SetAsDefault the default runtime's line, set where the config has
// one.
func inPlace(o Options, bare []byte, at int) ([]byte, error) {
	out := bare
	if out == nil {
		out = []byte(createdLine + "version = 2\n")
	}
	var main map[string]any
	if err := toml.Unmarshal(out, &main); err != nil {
		return nil, fmt.Errorf("containerd config %s: %w", o.Config, tomlerr.Line(err))
	}
	cri := criPath(tomlInt(main["version"]))
	ctrd := table(main, append(cri, "containerd")...)
	runtimes, hadRuntimes := ctrd["runtimes"].(map[string]any)
	if _, ok := runtimes[o.Name]; ok {
		return nil, fmt.Errorf("containerd config %s already has a runtime %q that gpuctk did not write: remove it, or name gpuctk's otherwise with --runtime-name", o.Config, o.Name)
	}
	rt := runtimeOf(o, ctrd)
	if at < 0 || at > len(out) {
		at = len(out)
	}
	var block bytes.Buffer
	if at > 0 && out[at-1] != '\n' {
		block.WriteString("\n\n" + blockBegin + noNewline + "\n")
	} else {
		block.WriteString("\n" + blockBegin + "\n")
	}
	// Each key set in the config's own table where it has one (the line
	// it had kept after a marker), else in the block.
	lines := keyLines(o, cri)
	var inBlock []keyLine
	for _, l := range lines {
		if _, in, err := setLine(out, l.table, l.key, l.value, l.mark); err != nil {
			return nil, fmt.Errorf("containerd config %s: %w", o.Config, err)
		} else if in {
			inBlock = append(inBlock, l)
		}
	}
	for _, table := range [][]string{cri, append(cri[:len(cri):len(cri)], "containerd")} {
		kv := map[string]any{}
		for _, l := range inBlock {
			if slices.Equal(l.table, table) {
				kv[l.key] = l.raw
			}
		}
		if len(kv) > 0 {
			if err := writeTable(&block, table, kv, ""); err != nil {
				return nil, err
			}
		}
	}
	if err := writeTable(&block, append(cri[:len(cri):len(cri)], "containerd", "runtimes", o.Name), rt, ""); err != nil {
		return nil, err
	}
	if !hadRuntimes && o.Name != "runc" {
		// A runtimes table of the config's own replaces containerd's
		// built-in one, and with it the runc the default runtime names.
		block.WriteString("\n")
		if err := writeTable(&block, append(cri[:len(cri):len(cri)], "containerd", "runtimes", "runc"), map[string]any{"runtime_type": runcShim}, ""); err != nil {
			return nil, err
		}
	}
	block.WriteString(blockEnd + "\n")
	out = slices.Concat(out[:at], block.Bytes(), out[at:])
	for _, l := range lines {
		if slices.ContainsFunc(inBlock, func(b keyLine) bool { return b.key == l.key && slices.Equal(b.table, l.table) }) {
			continue
		}
		var err error
		if out, _, err = setLine(out, l.table, l.key, l.value, l.mark); err != nil {
			return nil, fmt.Errorf("containerd config %s: %w", o.Config, err)
		}
	}
	var check map[string]any
	if err := toml.Unmarshal(out, &check); err != nil {
		return nil, fmt.Errorf("containerd config %s: with the runtime added it would not be TOML (%w): add the runtime %q by hand", o.Config, tomlerr.Line(err), o.Name)
	}
	return out, nil
}

// keyLine is a key configure sets in a table of a version 1 or 2 config.
type keyLine struct {
	table      []string
	key, value string // value as TOML
	raw        any
	mark       string
}

// keyLines are the keys configure sets beside the runtime in a config
// whose CRI table is cri: the default runtime's name, and containerd's own
// CDI support (off by default in 1.7).
func keyLines(o Options, cri []string) []keyLine {
	var out []keyLine
	if o.CDISpecDirs != nil {
		quoted := make([]string, len(o.CDISpecDirs))
		for i, d := range o.CDISpecDirs {
			quoted[i] = strconv.Quote(d)
		}
		out = append(out,
			keyLine{table: cri, key: "enable_cdi", value: "true", raw: true, mark: markSet},
			keyLine{table: cri, key: "cdi_spec_dirs", value: "[" + strings.Join(quoted, ", ") + "]", raw: o.CDISpecDirs, mark: markSet})
	}
	if o.SetAsDefault {
		out = append(out, keyLine{table: append(cri[:len(cri):len(cri)], "containerd"), key: "default_runtime_name",
			value: strconv.Quote(o.Name), raw: o.Name, mark: markDefault})
	}
	return out
}

// setLine sets key in the table at path to value (TOML): in place of the
// line the config has (kept after a marker), else as a line after the
// table's header; inBlock when the config has neither, and the block must
// carry it.
func setLine(data []byte, path []string, key, value, mark string) (out []byte, inBlock bool, err error) {
	p := &unstable.Parser{}
	p.Reset(data)
	var current []string
	header := -1
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			current = keyPath(e.Key())
			if e.Kind == unstable.Table && slices.Equal(current, path) {
				// A table's own Raw is empty: its first key's is where
				// the header is.
				k := e.Key()
				k.Next()
				header = lineEnd(data, int(k.Node().Raw.Offset))
			}
		case unstable.KeyValue:
			full := append(slices.Clip(current), keyPath(e.Key())...)
			if !slices.Equal(full, append(slices.Clip(path), key)) {
				continue
			}
			start := bytes.LastIndexByte(data[:e.Raw.Offset], '\n') + 1
			end := lineEnd(data, int(e.Raw.Offset))
			indent := data[start:e.Raw.Offset]
			old := data[start:end]
			// The key as the config writes it, relative to its table: a
			// dotted containerd.default_runtime_name stays one.
			line := tomlKey(keyPath(e.Key())) + " = " + value
			if string(bytes.TrimSpace(old)) == line {
				return data, false, nil // the config's own, as wanted
			}
			return slices.Concat(data[:start], indent, []byte(line+markReplaced), old, data[end:]), false, nil
		}
	}
	if err := p.Error(); err != nil {
		return nil, false, err
	}
	if header < 0 {
		return data, true, nil
	}
	at := min(header+1, len(data))
	return slices.Concat(data[:at], []byte("  "+key+" = "+value+mark+"\n"), data[at:]), false, nil
}

func keyPath(it unstable.Iterator) []string {
	var k []string
	for it.Next() {
		k = append(k, string(it.Node().Data))
	}
	return k
}

// runtimeOf is the runtime: a copy of the default runc runtime (else
// runc) with gpuctk-runtime as its binary.
func runtimeOf(o Options, ctrd map[string]any) map[string]any {
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
	} else {
		opts = deepCopy(opts)
	}
	opts["BinaryName"] = o.Path
	rt["options"] = opts
	return rt
}

// containerdDropIn writes the drop-in of a version 3 config: only what
// gpuctk adds, which containerd 2.x merges deeply into the main config.
func containerdDropIn(o Options, main map[string]any, version int) ([]byte, error) {
	cri := criPath(version)
	rt := runtimeOf(o, table(main, append(cri, "containerd")...))
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by `gpuctk runtime configure --runtime containerd`: containers of the runtime %q\n", o.Name)
	fmt.Fprintf(&b, "# get the GPUs they ask for through gpuctk-runtime. `--uninstall` removes this file.\n")
	fmt.Fprintf(&b, "version = %d\n", version)
	if o.CDISpecDirs != nil {
		// containerd 2.x has CDI always on (2.4 has no enable_cdi) and
		// reads cdi_spec_dirs.
		b.WriteString("\n")
		if err := writeTable(&b, cri, map[string]any{"cdi_spec_dirs": o.CDISpecDirs}, ""); err != nil {
			return nil, err
		}
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
