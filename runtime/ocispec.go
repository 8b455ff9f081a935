package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// object is a JSON object of config.json decoded one level deep: each
// member stays the bytes it was read as until it is set. A create decodes
// only the members CDI edits read or write (process.env, process.user,
// mounts, hooks, and linux's devices, resources.devices, netDevices,
// intelRdt and namespaces) and writes back only those that changed, so
// every other member, including members newer than the runtime-spec we
// know, is kept byte for byte and in its place.
//
// It is also what keeps create fast: in a fresh process, encoding/json
// spends most of its time building per-type tables, and the tables of
// specs.Process and specs.Linux (capabilities, rlimits, every cgroup
// controller, seccomp, ...) cost more than all the rest of a create.
type object struct {
	path    string // for messages: "", "process", "linux.resources"
	data    []byte // as read; nil for an object made here
	members map[string]json.RawMessage
	added   []string // members set that data does not have, in order
	dirty   bool
	// children are the members decoded as objects so far, each decoded
	// once: edits below them go to the same object.
	children map[string]*object
}

// parseObject decodes data, which must be a JSON object or null (nil
// object, no error), as the member at path.
func parseObject(data []byte, path string) (*object, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		var te *json.UnmarshalTypeError
		if path == "" && errors.As(err, &te) {
			return nil, fmt.Errorf("not a valid OCI spec: the document is %s %s, want an object", article(te.Value), te.Value)
		}
		return nil, jsonError(data, prefixField(err, path))
	}
	if m == nil {
		return nil, nil
	}
	return &object{path: path, data: data, members: m}, nil
}

func (o *object) member(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

// decode decodes member key, if present, into dst. A nil object has no
// members.
func (o *object) decode(key string, dst any) error {
	if o == nil {
		return nil
	}
	raw, ok := o.members[key]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return jsonError(raw, prefixField(err, o.member(key)))
	}
	return nil
}

// child decodes member key as an object: nil when it is absent or null.
// A member is decoded once; later calls return the same object.
func (o *object) child(key string) (*object, error) {
	if o == nil {
		return nil, nil
	}
	if c, ok := o.children[key]; ok {
		return c, nil
	}
	raw, ok := o.members[key]
	if !ok {
		return nil, nil
	}
	c, err := parseObject(raw, o.member(key))
	if err != nil || c == nil {
		return nil, err
	}
	if o.children == nil {
		o.children = map[string]*object{}
	}
	o.children[key] = c
	return c, nil
}

// set replaces member key with raw, or adds it after the others.
func (o *object) set(key string, raw json.RawMessage) {
	if _, ok := o.members[key]; !ok && !slices.Contains(o.added, key) {
		o.added = append(o.added, key)
	}
	o.members[key] = raw
	o.dirty = true
}

// setPath sets the member at path below o, making the objects on the way
// where they are absent or null.
func (o *object) setPath(path []string, raw json.RawMessage) error {
	if len(path) == 1 {
		o.set(path[0], raw)
		return nil
	}
	c, err := o.child(path[0])
	if err != nil {
		return err
	}
	if c == nil {
		c = &object{path: o.member(path[0]), members: map[string]json.RawMessage{}}
		if o.children == nil {
			o.children = map[string]*object{}
		}
		o.children[path[0]] = c
	}
	if err := c.setPath(path[1:], raw); err != nil {
		return err
	}
	o.set(path[0], c.bytes())
	return nil
}

// bytes encodes the object: as read when nothing was set, else its
// members in the order read, then those added.
func (o *object) bytes() []byte {
	if !o.dirty {
		return o.data
	}
	keys := append(memberOrder(o.data), o.added...)
	if len(keys) != len(o.members) {
		// Never expected: order and members disagree. Lose no member.
		for k := range o.members {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			out.WriteByte(',')
		}
		name, _ := json.Marshal(k)
		out.Write(name)
		out.WriteByte(':')
		out.Write(o.members[k])
	}
	out.WriteByte('}')
	return out.Bytes()
}

// memberOrder lists the member names of data, a JSON object that
// encoding/json has accepted already, in order, each once (where a name
// repeats, encoding/json, and so runc, keeps the last value; so does
// object.members). A small scanner
// of our own: json.Decoder's Token costs more than the rest of a create.
func memberOrder(data []byte) []string {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil
	}
	var keys []string
	for i++; ; {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] == '}' {
			return keys
		}
		if data[i] == ',' {
			i++
			continue
		}
		end := stringEnd(data, i)
		raw := data[i:end]
		var k string
		if bytes.IndexByte(raw, '\\') < 0 && len(raw) >= 2 && utf8.Valid(raw) {
			k = string(raw[1 : len(raw)-1])
		} else if err := json.Unmarshal(raw, &k); err != nil {
			return keys
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		i = skipSpace(data, end)
		if i < len(data) && data[i] == ':' {
			i++
		}
		i = valueEnd(data, skipSpace(data, i))
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string that starts at i.
func stringEnd(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(data)
}

// valueEnd returns the index just past the value that starts at i.
func valueEnd(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = stringEnd(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(data) && !strings.ContainsRune(",}] \t\r\n", rune(data[i])) {
		i++
	}
	return i
}

// prefixField names the member a type error happened in.
func prefixField(err error, key string) error {
	var te *json.UnmarshalTypeError
	if key != "" && errors.As(err, &te) {
		if te.Field == "" {
			te.Field = key
		} else {
			te.Field = key + "." + te.Field
		}
	}
	return err
}

// editable is the part of a config.json that CDI edits read or write, as
// a specs.Spec holding those members alone, tied to the document it came
// from.
type editable struct {
	doc  *object
	spec specs.Spec
	// before holds each member's encoding as read, to write back only
	// those that changed.
	before map[string][]byte
}

// editableMembers are the members of editable, by path, with the field of
// spec that holds each.
var editableMembers = []struct {
	path  string
	field func(*specs.Spec) any
}{
	{"process.env", func(s *specs.Spec) any {
		if s.Process == nil {
			return nil
		}
		return s.Process.Env
	}},
	{"process.user.additionalGids", func(s *specs.Spec) any {
		if s.Process == nil {
			return nil
		}
		return s.Process.User.AdditionalGids
	}},
	{"mounts", func(s *specs.Spec) any { return s.Mounts }},
	{"hooks", func(s *specs.Spec) any { return s.Hooks }},
	{"linux.devices", func(s *specs.Spec) any { return linuxField(s, func(l *specs.Linux) any { return l.Devices }) }},
	{"linux.netDevices", func(s *specs.Spec) any { return linuxField(s, func(l *specs.Linux) any { return l.NetDevices }) }},
	{"linux.intelRdt", func(s *specs.Spec) any { return linuxField(s, func(l *specs.Linux) any { return l.IntelRdt }) }},
	{"linux.resources.devices", func(s *specs.Spec) any {
		return linuxField(s, func(l *specs.Linux) any {
			if l.Resources == nil {
				return nil
			}
			return l.Resources.Devices
		})
	}},
}

func linuxField(s *specs.Spec, f func(*specs.Linux) any) any {
	if s.Linux == nil {
		return nil
	}
	return f(s.Linux)
}

// readEditable decodes the editable members of doc. annotations, mounts
// and env were decoded already (to see whether the container asks for
// devices at all).
func readEditable(doc *object, annotations map[string]string, mounts []specs.Mount, process *object, env []string) (*editable, error) {
	e := &editable{doc: doc, spec: specs.Spec{Annotations: annotations, Mounts: mounts}}
	if err := doc.decode("hooks", &e.spec.Hooks); err != nil {
		return nil, err
	}
	if process != nil {
		e.spec.Process = &specs.Process{Env: env}
		if err := process.decode("user", &e.spec.Process.User); err != nil {
			return nil, err
		}
	}
	linux, err := doc.child("linux")
	if err != nil {
		return nil, err
	}
	if linux != nil {
		l := &specs.Linux{}
		for key, dst := range map[string]any{"devices": &l.Devices, "netDevices": &l.NetDevices, "intelRdt": &l.IntelRdt, "namespaces": &l.Namespaces} {
			if err := linux.decode(key, dst); err != nil {
				return nil, err
			}
		}
		resources, err := linux.child("resources")
		if err != nil {
			return nil, err
		}
		if resources != nil {
			l.Resources = &specs.LinuxResources{}
			if err := resources.decode("devices", &l.Resources.Devices); err != nil {
				return nil, err
			}
		}
		e.spec.Linux = l
	}
	e.before = map[string][]byte{}
	for _, m := range editableMembers {
		data, err := json.Marshal(m.field(&e.spec))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.path, err)
		}
		e.before[m.path] = data
	}
	return e, nil
}

// bytes writes the members that changed back into the document and
// encodes it.
func (e *editable) bytes() ([]byte, error) {
	for _, m := range editableMembers {
		data, err := json.Marshal(m.field(&e.spec))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.path, err)
		}
		if bytes.Equal(data, e.before[m.path]) {
			continue
		}
		if err := e.doc.setPath(strings.Split(m.path, "."), data); err != nil {
			return nil, err
		}
	}
	return e.doc.bytes(), nil
}
