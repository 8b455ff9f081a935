package cdientry

import (
	"strconv"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/jsonobj"
)

// AppendEdits appends e as encoding/json marshals it, byte for byte,
// without reflection: in the fresh process of a create that fills the
// cache, json.Marshal built its encoders for each type first, which cost
// more than the encoding. FuzzAppendEdits compares the two.
func AppendEdits(b []byte, e *cdispec.ContainerEdits) []byte {
	if e == nil {
		return append(b, "null"...)
	}
	o := object{b: b}
	if len(e.Env) > 0 {
		o.b = jsonobj.AppendStrings(o.key("env"), e.Env)
	}
	if len(e.DeviceNodes) > 0 {
		o.b = appendList(o.key("deviceNodes"), e.DeviceNodes, appendDeviceNode)
	}
	if len(e.NetDevices) > 0 {
		o.b = appendList(o.key("netDevices"), e.NetDevices, func(b []byte, n *cdispec.LinuxNetDevice) []byte {
			o := object{b: b}
			o.b = jsonobj.AppendString(o.key("hostInterfaceName"), n.HostInterfaceName)
			o.b = jsonobj.AppendString(o.key("name"), n.Name)
			return o.end()
		})
	}
	if len(e.Hooks) > 0 {
		o.b = appendList(o.key("hooks"), e.Hooks, func(b []byte, h *cdispec.Hook) []byte {
			o := object{b: b}
			o.b = jsonobj.AppendString(o.key("hookName"), h.HookName)
			o.b = jsonobj.AppendString(o.key("path"), h.Path)
			if len(h.Args) > 0 {
				o.b = jsonobj.AppendStrings(o.key("args"), h.Args)
			}
			if len(h.Env) > 0 {
				o.b = jsonobj.AppendStrings(o.key("env"), h.Env)
			}
			if h.Timeout != nil {
				o.b = strconv.AppendInt(o.key("timeout"), int64(*h.Timeout), 10)
			}
			return o.end()
		})
	}
	if len(e.Mounts) > 0 {
		o.b = appendList(o.key("mounts"), e.Mounts, func(b []byte, m *cdispec.Mount) []byte {
			o := object{b: b}
			o.b = jsonobj.AppendString(o.key("hostPath"), m.HostPath)
			o.b = jsonobj.AppendString(o.key("containerPath"), m.ContainerPath)
			if len(m.Options) > 0 {
				o.b = jsonobj.AppendStrings(o.key("options"), m.Options)
			}
			if m.Type != "" {
				o.b = jsonobj.AppendString(o.key("type"), m.Type)
			}
			return o.end()
		})
	}
	if r := e.IntelRdt; r != nil {
		o2 := object{b: o.key("intelRdt")}
		if r.ClosID != "" {
			o2.b = jsonobj.AppendString(o2.key("closID"), r.ClosID)
		}
		if r.L3CacheSchema != "" {
			o2.b = jsonobj.AppendString(o2.key("l3CacheSchema"), r.L3CacheSchema)
		}
		if r.MemBwSchema != "" {
			o2.b = jsonobj.AppendString(o2.key("memBwSchema"), r.MemBwSchema)
		}
		if len(r.Schemata) > 0 {
			o2.b = jsonobj.AppendStrings(o2.key("schemata"), r.Schemata)
		}
		if r.EnableMonitoring {
			o2.b = append(o2.key("enableMonitoring"), "true"...)
		}
		o.b = o2.end()
	}
	if len(e.AdditionalGIDs) > 0 {
		o.b = append(o.key("additionalGids"), '[')
		for i, g := range e.AdditionalGIDs {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			o.b = strconv.AppendUint(o.b, uint64(g), 10)
		}
		o.b = append(o.b, ']')
	}
	return o.end()
}

func appendDeviceNode(b []byte, n *cdispec.DeviceNode) []byte {
	o := object{b: b}
	o.b = jsonobj.AppendString(o.key("path"), n.Path)
	if n.HostPath != "" {
		o.b = jsonobj.AppendString(o.key("hostPath"), n.HostPath)
	}
	if n.Type != "" {
		o.b = jsonobj.AppendString(o.key("type"), n.Type)
	}
	if n.Major != 0 {
		o.b = strconv.AppendInt(o.key("major"), n.Major, 10)
	}
	if n.Minor != 0 {
		o.b = strconv.AppendInt(o.key("minor"), n.Minor, 10)
	}
	if n.FileMode != nil {
		o.b = strconv.AppendUint(o.key("fileMode"), uint64(*n.FileMode), 10)
	}
	if n.Permissions != "" {
		o.b = jsonobj.AppendString(o.key("permissions"), n.Permissions)
	}
	if n.UID != nil {
		o.b = strconv.AppendUint(o.key("uid"), uint64(*n.UID), 10)
	}
	if n.GID != nil {
		o.b = strconv.AppendUint(o.key("gid"), uint64(*n.GID), 10)
	}
	return o.end()
}

// object writes a JSON object's members: key starts one.
type object struct {
	b    []byte
	open bool
}

func (o *object) key(k string) []byte {
	if o.open {
		o.b = append(o.b, ',')
	} else {
		o.b = append(o.b, '{')
		o.open = true
	}
	return append(jsonobj.AppendString(o.b, k), ':')
}

func (o *object) end() []byte {
	if !o.open {
		return append(o.b, "{}"...)
	}
	return append(o.b, '}')
}

// appendList appends a list of pointers, a nil one as null.
func appendList[T any](b []byte, list []*T, item func([]byte, *T) []byte) []byte {
	b = append(b, '[')
	for i, v := range list {
		if i > 0 {
			b = append(b, ',')
		}
		if v == nil {
			b = append(b, "null"...)
		} else {
			b = item(b, v)
		}
	}
	return append(b, ']')
}
