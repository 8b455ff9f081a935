package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuctk/gpuctk/internal/jsonobj"
)

// object is a JSON object of config.json decoded one level deep (see
// jsonobj): each member stays the bytes it was read as until it is set. A
// create decodes only the members CDI edits read or write (process.env,
// process.user, mounts, hooks, and linux's devices, resources.devices,
// netDevices, intelRdt and namespaces) and writes back only those that
// changed, so every other member, including members newer than the
// runtime-spec we know, is kept byte for byte and in its place.
//
// It is also what keeps create fast: in a fresh process, encoding/json
// spends most of its time building per-type tables, and the tables of
// specs.Process and specs.Linux (capabilities, rlimits, every cgroup
// controller, seccomp, ...) cost more than all the rest of a create.
//
// The objects are structs to runc, whose encoding/json matches keys
// case-insensitively and takes the last of repeated ones: they are parsed
// in jsonobj.Fold mode, so a document where "process" and "Process" both
// appear is refused rather than read differently from runc.
type object struct {
	*jsonobj.Object
	// children are the members decoded as objects so far, each decoded
	// once: edits below them go to the same object.
	children map[string]*object
}

// parseDocument decodes config.json, which must be a JSON object.
func parseDocument(data []byte) (*object, error) {
	o, err := jsonobj.Parse(data, "", jsonobj.Fold)
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("not a valid OCI spec: the document is %s %s, want an object", article(te.Value), te.Value)
		}
		return nil, jsonError(data, err)
	}
	if o == nil {
		return nil, errors.New("not a valid OCI spec: the document is null, want an object")
	}
	return &object{Object: o}, nil
}

// mapMember says whether runc decodes the member at path into a Go map,
// whose keys are case-sensitive: only a key repeated exactly is ambiguous
// there.
func mapMember(path string) bool {
	return path == "annotations" || path == "linux.netDevices"
}

// decode decodes member key, if present, into dst, refusing repeated
// keys at any depth. A nil object has no members.
func (o *object) decode(key string, dst any) error {
	if o == nil {
		return nil
	}
	raw, ok := o.Get(key)
	if !ok {
		return nil
	}
	path := o.MemberPath(key)
	match := jsonobj.Fold
	if mapMember(path) {
		match = jsonobj.Exact
	}
	if err := jsonobj.CheckKeys(raw, path, match); err != nil {
		return err
	}
	if decodeMember(raw, dst) {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return jsonError(raw, prefixField(err, path))
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
	c, err := o.Object.Object(key, jsonobj.Fold)
	if err != nil {
		return nil, jsonError(nil, err)
	}
	if c == nil {
		return nil, nil
	}
	if o.children == nil {
		o.children = map[string]*object{}
	}
	o.children[key] = &object{Object: c}
	return o.children[key], nil
}

// setPath sets the member at path below o, making the objects on the way
// where they are absent or null.
func (o *object) setPath(path []string, raw json.RawMessage) error {
	if len(path) == 1 {
		o.Set(path[0], raw)
		return nil
	}
	c, err := o.child(path[0])
	if err != nil {
		return err
	}
	if c == nil {
		c = &object{Object: jsonobj.New(o.MemberPath(path[0]), jsonobj.Fold)}
		if o.children == nil {
			o.children = map[string]*object{}
		}
		o.children[path[0]] = c
	}
	if err := c.setPath(path[1:], raw); err != nil {
		return err
	}
	o.Set(path[0], c.Bytes())
	return nil
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
		data, err := marshalMember(m.field(&e.spec))
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
		data, err := marshalMember(m.field(&e.spec))
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
	return e.doc.Bytes(), nil
}
