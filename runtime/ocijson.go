package runtime

import (
	"encoding/json"
	"os"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuctk/gpuctk/internal/jsonobj"
)

// marshalMember encodes a member of config.json that CDI edits write,
// byte for byte as encoding/json does, without its reflection for the
// types every injection writes (see decodeEdits for why); other types go
// to encoding/json. TestMarshalMember compares the two.
func marshalMember(v any) ([]byte, error) {
	// One allocation of about the encoding's size: grown by doubling, the
	// buffers of the hooks (the hook's 13 KiB of arguments) and mounts
	// touched fresh pages at every step in a process that lives 2 ms.
	var b []byte
	if n := sizeHint(v); n > 0 {
		b = make([]byte, 0, n)
	}
	switch v := v.(type) {
	case nil:
		return []byte("null"), nil
	case []string:
		return jsonobj.AppendStrings(b, v), nil
	case []uint32:
		if v == nil {
			return []byte("null"), nil
		}
		b = append(b, '[')
		for i, n := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(n), 10)
		}
		return append(b, ']'), nil
	case []specs.Mount:
		if v == nil {
			return []byte("null"), nil
		}
		b = append(b, '[')
		for i, m := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendMount(b, &m)
		}
		return append(b, ']'), nil
	case *specs.Hooks:
		if v == nil {
			return []byte("null"), nil
		}
		return appendHooks(b, v), nil
	case []specs.LinuxDevice:
		if v == nil {
			return []byte("null"), nil
		}
		b = append(b, '[')
		for i, d := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendDevice(b, &d)
		}
		return append(b, ']'), nil
	case []specs.LinuxDeviceCgroup:
		if v == nil {
			return []byte("null"), nil
		}
		b = append(b, '[')
		for i, d := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendDeviceCgroup(b, &d)
		}
		return append(b, ']'), nil
	case map[string]specs.LinuxNetDevice:
		if v == nil {
			return []byte("null"), nil
		}
	case *specs.LinuxIntelRdt:
		if v == nil {
			return []byte("null"), nil
		}
	}
	return json.Marshal(v)
}

// sizeHint is about the size of marshalMember's encoding of v: the
// strings' lengths plus the keys and punctuation around them; strings that
// need escaping make it longer. 0 for a nil value (encoded as a constant)
// and for the types marshalMember leaves to encoding/json.
func sizeHint(v any) int {
	strs := func(l []string) int {
		n := 2
		for _, s := range l {
			n += len(s) + 3
		}
		return n
	}
	switch v := v.(type) {
	case []string:
		if v == nil {
			return 0
		}
		return strs(v)
	case []specs.Mount:
		if v == nil {
			return 0
		}
		n := 2
		for _, m := range v {
			n += len(m.Destination) + len(m.Type) + len(m.Source) + strs(m.Options) + 64 + 64*(len(m.UIDMappings)+len(m.GIDMappings))
		}
		return n
	case *specs.Hooks:
		if v == nil {
			return 0
		}
		n := 2
		for _, l := range [][]specs.Hook{v.Prestart, v.CreateRuntime, v.CreateContainer, v.StartContainer, v.Poststart, v.Poststop} { //nolint:staticcheck // still in the spec
			n += 24
			for _, h := range l {
				n += len(h.Path) + strs(h.Args) + strs(h.Env) + 48
			}
		}
		return n
	case []specs.LinuxDevice:
		if v == nil {
			return 0
		}
		return 2 + 128*len(v)
	case []specs.LinuxDeviceCgroup:
		if v == nil {
			return 0
		}
		return 2 + 80*len(v)
	case []uint32:
		if v == nil {
			return 0
		}
		return 2 + 11*len(v)
	}
	return 0
}

// member appends "key": after the opening brace or a member.
func member(b []byte, first *bool, key string) []byte {
	if !*first {
		b = append(b, ',')
	}
	*first = false
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

func appendMount(b []byte, m *specs.Mount) []byte {
	first := true
	b = append(b, '{')
	b = jsonobj.AppendString(member(b, &first, "destination"), m.Destination)
	if m.Type != "" {
		b = jsonobj.AppendString(member(b, &first, "type"), m.Type)
	}
	if m.Source != "" {
		b = jsonobj.AppendString(member(b, &first, "source"), m.Source)
	}
	if len(m.Options) > 0 {
		b = jsonobj.AppendStrings(member(b, &first, "options"), m.Options)
	}
	for _, idm := range []struct {
		key string
		m   []specs.LinuxIDMapping
	}{{"uidMappings", m.UIDMappings}, {"gidMappings", m.GIDMappings}} {
		if len(idm.m) == 0 {
			continue
		}
		b = append(member(b, &first, idm.key), '[')
		for i, x := range idm.m {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"containerID":`...)
			b = strconv.AppendUint(b, uint64(x.ContainerID), 10)
			b = append(b, `,"hostID":`...)
			b = strconv.AppendUint(b, uint64(x.HostID), 10)
			b = append(b, `,"size":`...)
			b = strconv.AppendUint(b, uint64(x.Size), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendHooks(b []byte, h *specs.Hooks) []byte {
	first := true
	b = append(b, '{')
	for _, l := range []struct {
		key   string
		hooks []specs.Hook
	}{
		{"prestart", h.Prestart}, //nolint:staticcheck // still in the spec
		{"createRuntime", h.CreateRuntime}, {"createContainer", h.CreateContainer},
		{"startContainer", h.StartContainer}, {"poststart", h.Poststart}, {"poststop", h.Poststop},
	} {
		if len(l.hooks) == 0 {
			continue
		}
		b = append(member(b, &first, l.key), '[')
		for i, x := range l.hooks {
			if i > 0 {
				b = append(b, ',')
			}
			f := true
			b = append(b, '{')
			b = jsonobj.AppendString(member(b, &f, "path"), x.Path)
			if len(x.Args) > 0 {
				b = jsonobj.AppendStrings(member(b, &f, "args"), x.Args)
			}
			if len(x.Env) > 0 {
				b = jsonobj.AppendStrings(member(b, &f, "env"), x.Env)
			}
			if x.Timeout != nil {
				b = strconv.AppendInt(member(b, &f, "timeout"), int64(*x.Timeout), 10)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendDevice(b []byte, d *specs.LinuxDevice) []byte {
	first := true
	b = append(b, '{')
	b = jsonobj.AppendString(member(b, &first, "path"), d.Path)
	b = jsonobj.AppendString(member(b, &first, "type"), d.Type)
	b = strconv.AppendInt(member(b, &first, "major"), d.Major, 10)
	b = strconv.AppendInt(member(b, &first, "minor"), d.Minor, 10)
	if d.FileMode != nil {
		b = strconv.AppendUint(member(b, &first, "fileMode"), uint64(*d.FileMode), 10)
	}
	if d.UID != nil {
		b = strconv.AppendUint(member(b, &first, "uid"), uint64(*d.UID), 10)
	}
	if d.GID != nil {
		b = strconv.AppendUint(member(b, &first, "gid"), uint64(*d.GID), 10)
	}
	return append(b, '}')
}

func appendDeviceCgroup(b []byte, d *specs.LinuxDeviceCgroup) []byte {
	first := true
	b = append(b, '{')
	b = strconv.AppendBool(member(b, &first, "allow"), d.Allow)
	if d.Type != "" {
		b = jsonobj.AppendString(member(b, &first, "type"), d.Type)
	}
	if d.Major != nil {
		b = strconv.AppendInt(member(b, &first, "major"), *d.Major, 10)
	}
	if d.Minor != nil {
		b = strconv.AppendInt(member(b, &first, "minor"), *d.Minor, 10)
	}
	if d.Access != "" {
		b = jsonobj.AppendString(member(b, &first, "access"), d.Access)
	}
	return append(b, '}')
}

// decodeMember decodes a member of config.json into dst as json.Unmarshal
// does into a zero value, without reflection, for the types create reads;
// it returns false, leaving dst alone, for anything it does not take (a
// key not spelled as the struct tag, a null, another type), and
// json.Unmarshal then decides, with its errors. FuzzDecodeMember checks
// that whatever it reads, encoding/json reads the same.
func decodeMember(raw []byte, dst any) bool {
	d := &jsonDecoder{data: raw}
	ok := func() bool {
		d.space()
		return !d.err && d.i == len(d.data)
	}
	switch dst := dst.(type) {
	case *[]string:
		if v := d.strings(); ok() {
			*dst = v
			return true
		}
	case *map[string]string:
		v := d.stringMap()
		if ok() {
			*dst = v
			return true
		}
	case *[]specs.Mount:
		v := jsonList(d, func() (m specs.Mount) {
			d.object(func(key string) {
				switch key {
				case "destination":
					m.Destination = d.str()
				case "type":
					m.Type = d.str()
				case "source":
					m.Source = d.str()
				case "options":
					m.Options = d.strings()
				case "uidMappings":
					m.UIDMappings = d.idMappings()
				case "gidMappings":
					m.GIDMappings = d.idMappings()
				default:
					d.fail()
				}
			})
			return m
		})
		if ok() {
			*dst = v
			return true
		}
	case **specs.Hooks:
		var h specs.Hooks
		d.object(func(key string) {
			switch key {
			case "prestart":
				h.Prestart = d.hooks() //nolint:staticcheck // still in the spec
			case "createRuntime":
				h.CreateRuntime = d.hooks()
			case "createContainer":
				h.CreateContainer = d.hooks()
			case "startContainer":
				h.StartContainer = d.hooks()
			case "poststart":
				h.Poststart = d.hooks()
			case "poststop":
				h.Poststop = d.hooks()
			default:
				d.fail()
			}
		})
		if ok() {
			*dst = &h
			return true
		}
	case *specs.User:
		var u specs.User
		d.object(func(key string) {
			switch key {
			case "uid":
				u.UID = uint32(d.uint(32))
			case "gid":
				u.GID = uint32(d.uint(32))
			case "umask":
				v := uint32(d.uint(32))
				u.Umask = &v
			case "additionalGids":
				u.AdditionalGids = jsonList(d, func() uint32 { return uint32(d.uint(32)) })
			case "username":
				u.Username = d.str()
			default:
				d.fail()
			}
		})
		if ok() {
			*dst = u
			return true
		}
	case *[]specs.LinuxDevice:
		v := jsonList(d, func() (x specs.LinuxDevice) {
			d.object(func(key string) {
				switch key {
				case "path":
					x.Path = d.str()
				case "type":
					x.Type = d.str()
				case "major":
					x.Major = d.int(64)
				case "minor":
					x.Minor = d.int(64)
				case "fileMode":
					m := os.FileMode(d.uint(32))
					x.FileMode = &m
				case "uid":
					n := uint32(d.uint(32))
					x.UID = &n
				case "gid":
					n := uint32(d.uint(32))
					x.GID = &n
				default:
					d.fail()
				}
			})
			return x
		})
		if ok() {
			*dst = v
			return true
		}
	case *[]specs.LinuxDeviceCgroup:
		v := jsonList(d, func() (x specs.LinuxDeviceCgroup) {
			d.object(func(key string) {
				switch key {
				case "allow":
					x.Allow = d.bool()
				case "type":
					x.Type = d.str()
				case "major":
					n := d.int(64)
					x.Major = &n
				case "minor":
					n := d.int(64)
					x.Minor = &n
				case "access":
					x.Access = d.str()
				default:
					d.fail()
				}
			})
			return x
		})
		if ok() {
			*dst = v
			return true
		}
	case *[]specs.LinuxNamespace:
		v := jsonList(d, func() (x specs.LinuxNamespace) {
			d.object(func(key string) {
				switch key {
				case "type":
					x.Type = specs.LinuxNamespaceType(d.str())
				case "path":
					x.Path = d.str()
				default:
					d.fail()
				}
			})
			return x
		})
		if ok() {
			*dst = v
			return true
		}
	}
	return false
}

func (d *jsonDecoder) idMappings() []specs.LinuxIDMapping {
	return jsonList(d, func() (m specs.LinuxIDMapping) {
		d.object(func(key string) {
			switch key {
			case "containerID":
				m.ContainerID = uint32(d.uint(32))
			case "hostID":
				m.HostID = uint32(d.uint(32))
			case "size":
				m.Size = uint32(d.uint(32))
			default:
				d.fail()
			}
		})
		return m
	})
}

func (d *jsonDecoder) hooks() []specs.Hook {
	return jsonList(d, func() (h specs.Hook) {
		d.object(func(key string) {
			switch key {
			case "path":
				h.Path = d.str()
			case "args":
				h.Args = d.strings()
			case "env":
				h.Env = d.strings()
			case "timeout":
				n := int(d.int(strconv.IntSize))
				h.Timeout = &n
			default:
				d.fail()
			}
		})
		return h
	})
}
