package runtime

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// decodeEdits decodes the JSON of a cache entry's edits, as encoding/json
// would into a cdispec.ContainerEdits, without reflection: in a fresh
// process encoding/json builds its tables of each type first, which cost a
// warm create more than the decoding itself. It takes what encoding/json
// writes for these types and refuses anything else (an unknown member, a
// key of another case, a duplicate): the entry is then not read, and the
// specs are resolved again. TestDecodeEdits compares it with
// encoding/json on every device of the golden specs.
func decodeEdits(data []byte) (*cdispec.ContainerEdits, error) {
	d := &jsonDecoder{data: data}
	var e cdispec.ContainerEdits
	d.edits(&e)
	d.space()
	if d.err || d.i != len(d.data) {
		return nil, errNotEdits
	}
	return &e, nil
}

// edits reads a ContainerEdits object into e.
func (d *jsonDecoder) edits(e *cdispec.ContainerEdits) {
	d.object(func(key string) {
		switch key {
		case "env":
			e.Env = d.strings()
		case "deviceNodes":
			e.DeviceNodes = jsonList(d, func() *cdispec.DeviceNode {
				var n cdispec.DeviceNode
				d.object(func(key string) {
					switch key {
					case "path":
						n.Path = d.str()
					case "hostPath":
						n.HostPath = d.str()
					case "type":
						n.Type = d.str()
					case "major":
						n.Major = d.int(64)
					case "minor":
						n.Minor = d.int(64)
					case "fileMode":
						m := os.FileMode(d.uint(32))
						n.FileMode = &m
					case "permissions":
						n.Permissions = d.str()
					case "uid":
						v := uint32(d.uint(32))
						n.UID = &v
					case "gid":
						v := uint32(d.uint(32))
						n.GID = &v
					default:
						d.fail()
					}
				})
				return &n
			})
		case "netDevices":
			e.NetDevices = jsonList(d, func() *cdispec.LinuxNetDevice {
				var n cdispec.LinuxNetDevice
				d.object(func(key string) {
					switch key {
					case "hostInterfaceName":
						n.HostInterfaceName = d.str()
					case "name":
						n.Name = d.str()
					default:
						d.fail()
					}
				})
				return &n
			})
		case "hooks":
			e.Hooks = jsonList(d, func() *cdispec.Hook {
				var h cdispec.Hook
				d.object(func(key string) {
					switch key {
					case "hookName":
						h.HookName = d.str()
					case "path":
						h.Path = d.str()
					case "args":
						h.Args = d.strings()
					case "env":
						h.Env = d.strings()
					case "timeout":
						v := int(d.int(strconv.IntSize))
						h.Timeout = &v
					default:
						d.fail()
					}
				})
				return &h
			})
		case "mounts":
			e.Mounts = jsonList(d, func() *cdispec.Mount {
				var m cdispec.Mount
				d.object(func(key string) {
					switch key {
					case "hostPath":
						m.HostPath = d.str()
					case "containerPath":
						m.ContainerPath = d.str()
					case "options":
						m.Options = d.strings()
					case "type":
						m.Type = d.str()
					default:
						d.fail()
					}
				})
				return &m
			})
		case "intelRdt":
			var r cdispec.IntelRdt
			d.object(func(key string) {
				switch key {
				case "closID":
					r.ClosID = d.str()
				case "l3CacheSchema":
					r.L3CacheSchema = d.str()
				case "memBwSchema":
					r.MemBwSchema = d.str()
				case "schemata":
					r.Schemata = d.strings()
				case "enableMonitoring":
					r.EnableMonitoring = d.bool()
				default:
					d.fail()
				}
			})
			e.IntelRdt = &r
		case "additionalGids":
			e.AdditionalGIDs = jsonList(d, func() uint32 { return uint32(d.uint(32)) })
		default:
			d.fail()
		}
	})
}

// decodeSpec decodes the JSON of a whole spec as encoding/json would into
// a cdispec.Spec, refusing what decodeEdits refuses (an unknown member
// among them, as DisallowUnknownFields does); ok is false then. devices
// is about how many devices it lists, to size the list once. js holds the
// JSON of the edits as read, so that a cache entry copies it rather than
// encoding the edits again.
func decodeSpec(data []byte, devices int) (s *cdispec.Spec, js *specJSON, ok bool) {
	d := &jsonDecoder{data: data}
	s = &cdispec.Spec{}
	js = &specJSON{}
	d.object(func(key string) {
		switch key {
		case "cdiVersion":
			s.Version = d.str()
		case "kind":
			s.Kind = d.str()
		case "annotations":
			s.Annotations = d.stringMap()
		case "devices":
			s.Devices = make([]cdispec.Device, 0, devices)
			js.devices = make([][]byte, 0, devices)
			s.Devices = jsonAppend(d, s.Devices, func() (dev cdispec.Device) {
				var raw []byte
				d.object(func(key string) {
					switch key {
					case "name":
						dev.Name = d.str()
					case "annotations":
						dev.Annotations = d.stringMap()
					case "containerEdits":
						raw = d.editsJSON(&dev.ContainerEdits)
					default:
						d.fail()
					}
				})
				js.devices = append(js.devices, raw)
				return dev
			})
		case "containerEdits":
			js.common = d.editsJSON(&s.ContainerEdits)
		default:
			d.fail()
		}
	})
	d.space()
	if d.err || d.i != len(d.data) || len(js.devices) != len(s.Devices) {
		return nil, nil, false
	}
	return s, js, true
}

// specJSON is the JSON text of a decoded spec's edits, slices of the data
// decoded: the spec's own (nil where it has none) and each device's, by
// index (nil where it has none).
type specJSON struct {
	common  []byte
	devices [][]byte
}

// editsJSON reads a ContainerEdits object into e, as edits does, and
// returns its text.
func (d *jsonDecoder) editsJSON(e *cdispec.ContainerEdits) []byte {
	d.space()
	start := d.i
	d.edits(e)
	if d.err {
		return nil
	}
	return d.data[start:d.i:d.i]
}

// stringMap reads an object of strings; null is a nil map.
func (d *jsonDecoder) stringMap() map[string]string {
	if d.null() {
		return nil
	}
	m := map[string]string{}
	d.object(func(key string) { m[key] = d.str() })
	return m
}

var errNotEdits = errors.New("not edits as gpuctk-runtime's cache writes them")

// jsonDecoder reads the JSON encoding/json writes (compact, members in
// struct order, no null where decodeEdits reads); err is set at the first
// thing it does not take, after which every read returns zero values.
type jsonDecoder struct {
	data []byte
	i    int
	err  bool
}

func (d *jsonDecoder) fail() { d.err = true; d.i = len(d.data) }

func (d *jsonDecoder) space() {
	for d.i < len(d.data) && (d.data[d.i] == ' ' || d.data[d.i] == '\t' || d.data[d.i] == '\n' || d.data[d.i] == '\r') {
		d.i++
	}
}

// next consumes c, after white space.
func (d *jsonDecoder) next(c byte) bool {
	d.space()
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads an object, calling member for each key, which must read
// the value. A key seen twice fails: encoding/json would take the last.
func (d *jsonDecoder) object(member func(key string)) {
	if !d.next('{') {
		d.fail()
		return
	}
	if d.next('}') {
		return
	}
	// A list while short, a map past that: annotations may hold many.
	var seen []string
	var many map[string]bool
	for !d.err {
		key := d.str()
		switch {
		case many != nil:
			if many[key] {
				d.fail()
			}
			many[key] = true
		case slices.Contains(seen, key):
			d.fail()
		case len(seen) == 16:
			many = map[string]bool{key: true}
			for _, k := range seen {
				many[k] = true
			}
		default:
			seen = append(seen, key)
		}
		if !d.next(':') {
			d.fail()
			return
		}
		member(key)
		if d.next('}') {
			return
		}
		if !d.next(',') {
			d.fail()
		}
	}
}

// array reads an array, calling item for each element. It says whether
// there was one: encoding/json leaves a nil slice for null, an empty one
// for [].
func (d *jsonDecoder) array(item func()) bool {
	if d.null() {
		return false
	}
	if !d.next('[') {
		d.fail()
		return false
	}
	if d.next(']') {
		return true
	}
	for !d.err {
		item()
		if d.next(']') {
			return true
		}
		if !d.next(',') {
			d.fail()
		}
	}
	return false
}

// jsonList reads an array into a slice, as encoding/json does.
func jsonList[T any](d *jsonDecoder, item func() T) []T {
	return jsonAppend(d, nil, item)
}

// jsonAppend is jsonList appending the items to out, an empty slice
// with room for them: null is a nil slice all the same.
func jsonAppend[T any](d *jsonDecoder, out []T, item func() T) []T {
	if !d.array(func() { out = append(out, item()) }) {
		return nil
	}
	if out == nil {
		out = []T{}
	}
	return out
}

func (d *jsonDecoder) null() bool {
	d.space()
	if len(d.data)-d.i >= 4 && string(d.data[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

func (d *jsonDecoder) strings() []string { return jsonList(d, d.str) }

func (d *jsonDecoder) bool() bool {
	d.space()
	for _, v := range []string{"true", "false"} {
		if len(d.data)-d.i >= len(v) && string(d.data[d.i:d.i+len(v)]) == v {
			d.i += len(v)
			return v == "true"
		}
	}
	d.fail()
	return false
}

// number returns the text of an integer.
func (d *jsonDecoder) number() string {
	d.space()
	start := d.i
	if d.i < len(d.data) && d.data[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.data) && d.data[d.i] >= '0' && d.data[d.i] <= '9' {
		d.i++
	}
	if d.i-digits > 1 && d.data[digits] == '0' {
		d.fail() // JSON has no leading zeros: 00 and 012 are not numbers
		return ""
	}
	return string(d.data[start:d.i])
}

func (d *jsonDecoder) int(bits int) int64 {
	v, err := strconv.ParseInt(d.number(), 10, bits)
	if err != nil {
		d.fail()
	}
	return v
}

func (d *jsonDecoder) uint(bits int) uint64 {
	v, err := strconv.ParseUint(d.number(), 10, bits)
	if err != nil {
		d.fail()
	}
	return v
}

// str reads a string as encoding/json decodes it: escapes resolved,
// invalid UTF-8 and lone surrogates replaced by U+FFFD.
func (d *jsonDecoder) str() string {
	if !d.next('"') {
		d.fail()
		return ""
	}
	start := d.i
	// The common case: no escape, valid UTF-8, no control character.
	for d.i < len(d.data) {
		c := d.data[d.i]
		if c == '"' {
			s := d.data[start:d.i]
			d.i++
			if utf8.Valid(s) {
				return string(s)
			}
			d.i = start
			break
		}
		if c == '\\' || c < 0x20 {
			break
		}
		d.i++
	}
	// The slow path takes the run before the first escape as it is only
	// when it is valid UTF-8; else it reads it again, invalid bytes
	// becoming U+FFFD as encoding/json has them.
	if !utf8.Valid(d.data[start:d.i]) {
		d.i = start
	}
	b := append([]byte(nil), d.data[start:d.i]...)
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			return string(b)
		case c < 0x20:
			d.fail()
			return ""
		case c == '\\':
			if d.i+1 >= len(d.data) {
				d.fail()
				return ""
			}
			e := d.data[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := d.hex4()
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if d.i+1 < len(d.data) && d.data[d.i] == '\\' && d.data[d.i+1] == 'u' {
						save := d.i
						d.i += 2
						if r2 = d.hex4(); utf16.DecodeRune(r, r2) == utf8.RuneError {
							d.i, r2 = save, -1
						}
					}
					if r2 >= 0 {
						r = utf16.DecodeRune(r, r2)
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
			default:
				d.fail()
				return ""
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			d.i++
		default:
			r, size := utf8.DecodeRune(d.data[d.i:])
			d.i += size
			b = utf8.AppendRune(b, r)
		}
	}
	d.fail()
	return ""
}

func (d *jsonDecoder) hex4() rune {
	if d.i+4 > len(d.data) {
		d.fail()
		return 0
	}
	v, err := strconv.ParseUint(string(d.data[d.i:d.i+4]), 16, 32)
	if err != nil {
		d.fail()
		return 0
	}
	d.i += 4
	return rune(v)
}
