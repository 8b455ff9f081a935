package runtime

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"unicode/utf8"

	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/cdientry"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

// The first create after a spec change parsed the spec with the CDI
// library, whose YAML decoder took over half of that create (8 ms of 15
// for the largest host's spec). The spec gpuctk writes is a small subset
// of YAML (cdi/yaml.go): block mappings and sequences indented by two
// spaces, bare keys, every string double-quoted with JSON's escapes,
// decimal integers, anchors on containerEdits and aliases to them. Where
// the spec dirs hold that one spec alone, gpuctkSpec reads it in linear
// time and checks it as the library does; anything else, including a
// spec that leaves that subset by one character, goes through the
// library as before.

// gpuctkMarker is the first line of the YAML specs gpuctk writes (the cdi
// package's Marker, which this package does not import).
const gpuctkMarker = "# Written by gpuctk.\n---\n"

// errNotOurs says a spec is not one gpuctkSpec reads: the library will.
var errNotOurs = errors.New("not a spec in gpuctk's YAML subset")

// gpuctkSpec returns the one spec of the spec dirs when it is a YAML spec
// gpuctk wrote and valid as the library checks it, with the JSON of its
// edits (see parseGpuctkYAML); an error when the library must read the
// dirs.
func gpuctkSpec(dirs []string) (*cdispec.Spec, *specJSON, error) {
	var path string
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			if ext := filepath.Ext(e.Name()); ext != ".json" && ext != ".yaml" {
				continue
			}
			// Two specs may define a device twice: the library resolves
			// that. So it does a symlink, a JSON spec, or anything odd.
			if path != "" || !e.Type().IsRegular() || filepath.Ext(e.Name()) != ".yaml" {
				return nil, nil, errNotOurs
			}
			path = filepath.Join(dir, e.Name())
		}
	}
	if path == "" {
		return nil, nil, errNotOurs
	}
	// Through the gate for files others control: the only file of the
	// folder may still be a 1 GiB one, or a FIFO swapped in since listed.
	data, err := readfile.Regular(path, cdientry.MaxSpecSize)
	if err != nil {
		return nil, nil, err
	}
	spec, js, err := parseGpuctkYAML(data)
	if err != nil {
		return nil, nil, err
	}
	if err := validateSpec(spec); err != nil {
		return nil, nil, err
	}
	return spec, js, nil
}

// validateSpec checks what the library's newSpec checks of a spec without
// annotations (which parseGpuctkYAML never returns); an error only means
// the library must say what is wrong.
func validateSpec(s *cdispec.Spec) error {
	if err := cdispec.ValidateVersion(s); err != nil {
		return err
	}
	vendor, class := parser.ParseQualifier(s.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return err
	}
	if err := parser.ValidateClassName(class); err != nil {
		return err
	}
	if err := validateEdits(&s.ContainerEdits); err != nil {
		return err
	}
	seen := make(map[string]bool, len(s.Devices))
	for i := range s.Devices {
		d := &s.Devices[i]
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return err
		}
		e := &d.ContainerEdits
		if len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.Hooks) == 0 && len(e.Mounts) == 0 {
			return errNotOurs // empty device edits
		}
		if err := validateEdits(e); err != nil {
			return err
		}
		if seen[d.Name] {
			return errNotOurs
		}
		seen[d.Name] = true
	}
	if len(s.Devices) == 0 {
		return errNotOurs
	}
	return nil
}

// yamlKeys are the keys gpuctk's spec writer writes, spelled exactly:
// encoding/json would match "Kind" to "kind", which the library refuses.
// Each has a bit of its own, for the keys a mapping has seen.
var yamlKeys = func() map[string]uint32 {
	keys := map[string]uint32{}
	for i, k := range []string{"cdiVersion", "kind", "devices", "name", "containerEdits",
		"env", "deviceNodes", "path", "hostPath", "type", "major",
		"minor", "fileMode", "permissions", "uid", "gid", "hooks",
		"hookName", "args", "timeout", "mounts", "containerPath", "options"} {
		keys[k] = 1 << i
	}
	return keys
}()

// parseGpuctkYAML reads a spec in the YAML subset gpuctk writes, by
// turning it into JSON, then decoding that strictly. js is the JSON of the
// edits: a device whose edits are an alias has the anchor's.
func parseGpuctkYAML(data []byte) (spec *cdispec.Spec, js *specJSON, err error) {
	body, ok := bytes.CutPrefix(data, []byte(gpuctkMarker))
	if !ok || !utf8.Valid(body) || len(body) == 0 || body[len(body)-1] != '\n' {
		return nil, nil, errNotOurs
	}
	// Sized up front, as is the JSON: in the fresh process of a first
	// create, memory grown by doubling is a page fault per 4 KiB.
	p := &yamlReader{anchors: map[string]int{}, same: map[int]int{},
		lines: make([]yamlLine, 0, bytes.Count(body, []byte("\n")))}
	for l := range bytes.SplitSeq(body[:len(body)-1], []byte("\n")) {
		text := bytes.TrimLeft(l, " ")
		if len(text) == 0 || text[len(text)-1] == ' ' {
			return nil, nil, errNotOurs
		}
		p.lines = append(p.lines, yamlLine{indent: len(l) - len(text), text: text})
	}
	if p.lines[0].indent != 0 {
		return nil, nil, errNotOurs
	}
	out, err := p.block(make([]byte, 0, len(body)), 0)
	if err != nil || p.i != len(p.lines) {
		return nil, nil, errNotOurs
	}
	// Without encoding/json: its reflection, and its type tables built
	// in each fresh process, took most of a first create's resolving.
	s, js, ok := decodeSpec(out, p.device+1)
	if !ok {
		return nil, nil, errNotOurs
	}
	for i, a := range p.same {
		s.Devices[i].ContainerEdits = s.Devices[a].ContainerEdits
		js.devices[i] = js.devices[a]
	}
	return s, js, nil
}

type yamlLine struct {
	indent int
	text   []byte
}

// yamlReader turns lines of the subset into JSON; i is the next line.
type yamlReader struct {
	lines []yamlLine
	i     int
	depth int
	// Anchors and aliases are taken where gpuctk writes them alone: on a
	// device's containerEdits. An alias is read as {} and the device then
	// shares the anchor's edits, decoded once: expanding them into the
	// JSON made it four times the YAML, and its decoding the slowest step.
	inDevices bool           // below the top-level devices key
	device    int            // the index of the current device
	anchors   map[string]int // the device whose edits each anchor names
	same      map[int]int    // devices whose edits are an alias: to the anchor's device
}

// maxYAMLDepth bounds the nesting of the subset: gpuctk's specs nest 7
// deep.
const maxYAMLDepth = 16

// block appends the JSON of the mapping or sequence whose lines start at
// the current line, at indent, to out.
func (p *yamlReader) block(out []byte, indent int) ([]byte, error) {
	if p.i >= len(p.lines) || p.lines[p.i].indent != indent || p.depth == maxYAMLDepth {
		return nil, errNotOurs
	}
	p.depth++
	defer func() { p.depth-- }()
	if string(p.lines[p.i].text) == "{}" {
		p.i++
		return append(out, "{}"...), nil
	}
	if bytes.HasPrefix(p.lines[p.i].text, []byte("- ")) {
		return p.sequence(out, indent)
	}
	return p.mapping(out, indent)
}

// sequence appends "- " items at indent: scalars, or mappings whose first
// key is on the item's line.
func (p *yamlReader) sequence(out []byte, indent int) ([]byte, error) {
	out = append(out, '[')
	for n := 0; p.i < len(p.lines) && p.lines[p.i].indent == indent; n++ {
		if p.inDevices && indent == 2 {
			p.device = n
		}
		rest, ok := bytes.CutPrefix(p.lines[p.i].text, []byte("- "))
		if !ok {
			return nil, errNotOurs
		}
		if n > 0 {
			out = append(out, ',')
		}
		if rest[0] == '"' || rest[0] == '-' || (rest[0] >= '0' && rest[0] <= '9') {
			v, err := scalar(rest)
			if err != nil {
				return nil, err
			}
			out = append(out, v...)
			p.i++
			continue
		}
		// The item's mapping: its first key where the "- " was.
		p.lines[p.i] = yamlLine{indent: indent + 2, text: rest}
		var err error
		if out, err = p.mapping(out, indent+2); err != nil {
			return nil, err
		}
	}
	return append(out, ']'), nil
}

// mapping appends "key: value" lines at indent.
func (p *yamlReader) mapping(out []byte, indent int) ([]byte, error) {
	out = append(out, '{')
	var seen uint32
	for first := true; p.i < len(p.lines) && p.lines[p.i].indent == indent; first = false {
		key, rest, ok := bytes.Cut(p.lines[p.i].text, []byte(":"))
		bit := yamlKeys[string(key)]
		if !ok || bit == 0 || seen&bit != 0 {
			return nil, errNotOurs
		}
		seen |= bit
		// Where gpuctk writes anchors and aliases: on devices[i].containerEdits.
		edits := p.inDevices && indent == 4 && string(key) == "containerEdits"
		if !first {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), key...), '"', ':')
		p.i++
		var err error
		switch {
		case len(rest) == 0 && indent == 0 && string(key) == "devices":
			p.inDevices = true
			out, err = p.child(out, indent)
			p.inDevices = false
		case len(rest) == 0:
			out, err = p.child(out, indent)
		case rest[0] != ' ' || len(rest) == 1:
			return nil, errNotOurs
		case rest[1] == '&':
			name := string(rest[2:])
			if _, taken := p.anchors[name]; !edits || !anchorName(name) || taken {
				return nil, errNotOurs
			}
			p.anchors[name] = p.device
			out, err = p.child(out, indent)
		case rest[1] == '*':
			a, ok := p.anchors[string(rest[2:])]
			if !edits || !ok {
				return nil, errNotOurs
			}
			p.same[p.device] = a
			out = append(out, "{}"...)
		default:
			var v []byte
			if v, err = scalar(rest[1:]); err == nil {
				out = append(out, v...)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

// child appends the block below a key at indent: more indented, or, for a
// sequence, indented the same.
func (p *yamlReader) child(out []byte, indent int) ([]byte, error) {
	if p.i >= len(p.lines) || p.lines[p.i].indent <= indent {
		return nil, errNotOurs
	}
	return p.block(out, p.lines[p.i].indent)
}

// anchorName says whether a is an anchor gpuctk writes: letters, digits,
// "-" and "_".
func anchorName(a string) bool {
	if a == "" {
		return false
	}
	for _, c := range []byte(a) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// scalar turns a double-quoted string or a decimal integer into JSON. It
// takes only the escapes gpuctk writes (\", \\ and \u of a character that
// is not a surrogate), which YAML and JSON read alike.
func scalar(v []byte) ([]byte, error) {
	if v[0] != '"' {
		digits := v
		if digits[0] == '-' {
			digits = digits[1:]
		}
		if len(digits) == 0 || (digits[0] == '0' && len(digits) > 1) || len(digits) > 19 {
			return nil, errNotOurs
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return nil, errNotOurs
			}
		}
		return v, nil
	}
	if len(v) < 2 || v[len(v)-1] != '"' {
		return nil, errNotOurs
	}
	for i := 1; i < len(v)-1; i++ {
		switch c := v[i]; {
		case c == '"' || c < 0x20 || c == 0x7f:
			return nil, errNotOurs
		case c == '\\':
			switch {
			case i+1 < len(v)-1 && (v[i+1] == '"' || v[i+1] == '\\'):
				i++
			case i+5 < len(v)-1 && v[i+1] == 'u':
				r, err := strconv.ParseUint(string(v[i+2:i+6]), 16, 16)
				if err != nil || (r >= 0xd800 && r <= 0xdfff) {
					return nil, errNotOurs
				}
				i += 5
			default:
				return nil, errNotOurs
			}
		}
	}
	// YAML takes C1 controls, the line separators and the BOM in a
	// double-quoted string otherwise than JSON; gpuctk writes them
	// escaped.
	for _, r := range string(v) {
		if (r >= 0x80 && r <= 0x9f) || r == 0x2028 || r == 0x2029 || r == 0xfeff {
			return nil, errNotOurs
		}
	}
	return v, nil
}
