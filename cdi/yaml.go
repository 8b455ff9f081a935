package cdi

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"tags.cncf.io/container-device-interface/specs-go"
)

// yamlWriter writes the subset of the spec that gpuctk produces as block
// YAML, directly rather than through a reflective encoder (which was the
// slowest step of generating a large host's spec). Every string is written
// double-quoted with JSON escapes, which YAML reads as the same string, so
// no value can be misread as a number, a boolean or a sexagesimal ("0:1").
type yamlWriter struct {
	b   []byte
	err error
}

// checkYAMLFields refuses a spec with fields yamlWriter does not write
// (annotations, Intel RDT, network devices, additional GIDs), which the
// generator never produces: dropping them silently would write a
// different spec.
func checkYAMLFields(s *specs.Spec) error {
	if len(s.Annotations) > 0 || !plainEdits(&s.ContainerEdits) {
		return fmt.Errorf("spec uses fields gpuctk's YAML writer does not write (annotations, intelRdt, netDevices, additionalGids): write it as JSON")
	}
	for i := range s.Devices {
		if len(s.Devices[i].Annotations) > 0 || !plainEdits(&s.Devices[i].ContainerEdits) {
			return fmt.Errorf("device %q uses fields gpuctk's YAML writer does not write (annotations, intelRdt, netDevices, additionalGids): write it as JSON", s.Devices[i].Name)
		}
	}
	return nil
}

func plainEdits(e *specs.ContainerEdits) bool {
	return e.IntelRdt == nil && len(e.NetDevices) == 0 && len(e.AdditionalGIDs) == 0
}

// Marker is the first line of every YAML spec gpuctk writes: package
// removal deletes /var/run/cdi/nvidia.yaml only when it starts with it, so
// a spec another tool (or an admin) wrote there is left alone, even one
// that calls gpuctk-hook.
const Marker = "# Written by gpuctk."

// spec writes s. Edits that several devices share (the replicas of a
// device, and its other names) are written once with a YAML anchor and
// referred to by alias: every runtime that reads the spec through the CDI
// library parses the whole file at each container creation (podman, and
// gpuctk-runtime, per container), and the largest host's spec shrinks from
// 550 KiB to 152 KiB with every replica name, which that parse reads in a
// third of the time (209 KiB to 87 KiB with the default names).
func (w *yamlWriter) spec(s *specs.Spec) []byte {
	w.b = append(w.b, Marker+"\n---\n"...)
	w.str(0, "cdiVersion", s.Version)
	w.str(0, "kind", s.Kind)
	w.line(0, "devices:")
	edits := make([][]byte, len(s.Devices))
	uses := map[string]int{}
	for i := range s.Devices {
		e := yamlWriter{}
		e.edits(6, &s.Devices[i].ContainerEdits)
		edits[i] = e.b
		uses[string(e.b)]++
		if w.err == nil {
			w.err = e.err
		}
	}
	anchors, used := map[string]string{}, map[string]bool{}
	for i := range s.Devices {
		d := &s.Devices[i]
		w.item(2, "name", d.Name)
		key := string(edits[i])
		switch a, seen := anchors[key]; {
		case seen:
			w.line(4, "containerEdits: *"+a)
		case uses[key] > 1 && !isEmpty(&d.ContainerEdits):
			a = anchorName(d.Name, used)
			anchors[key] = a
			w.line(4, "containerEdits: &"+a)
			w.b = append(w.b, edits[i]...)
		default:
			w.line(4, "containerEdits:")
			w.b = append(w.b, edits[i]...)
		}
	}
	if !isEmpty(&s.ContainerEdits) {
		w.line(0, "containerEdits:")
		w.edits(2, &s.ContainerEdits)
	}
	return w.b
}

// anchorName turns a device name into a YAML anchor that every YAML
// parser reads (go-yaml takes only letters, digits, "-" and "_"), not yet
// in used, and adds it there.
func anchorName(device string, used map[string]bool) string {
	a := "edits-" + strings.NewReplacer(":", "_", ".", "_").Replace(device)
	for n, base := 2, a; used[a]; n++ {
		a = base + "-" + strconv.Itoa(n)
	}
	used[a] = true
	return a
}

func isEmpty(e *specs.ContainerEdits) bool {
	return len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.Hooks) == 0 && len(e.Mounts) == 0
}

func (w *yamlWriter) edits(ind int, e *specs.ContainerEdits) {
	if isEmpty(e) {
		w.indent(ind)
		w.b = append(w.b, "{}\n"...)
		return
	}
	w.list(ind, "env", e.Env)
	if len(e.DeviceNodes) > 0 {
		w.line(ind, "deviceNodes:")
		for _, n := range e.DeviceNodes {
			w.item(ind+2, "path", n.Path)
			w.optStr(ind+4, "hostPath", n.HostPath)
			w.optStr(ind+4, "type", n.Type)
			if n.Type != "" || n.Major != 0 || n.Minor != 0 {
				w.num(ind+4, "major", n.Major)
				w.num(ind+4, "minor", n.Minor)
			}
			if n.FileMode != nil {
				w.num(ind+4, "fileMode", int64(*n.FileMode))
			}
			w.optStr(ind+4, "permissions", n.Permissions)
			if n.UID != nil {
				w.num(ind+4, "uid", int64(*n.UID))
			}
			if n.GID != nil {
				w.num(ind+4, "gid", int64(*n.GID))
			}
		}
	}
	if len(e.Hooks) > 0 {
		w.line(ind, "hooks:")
		for _, h := range e.Hooks {
			w.item(ind+2, "hookName", h.HookName)
			w.str(ind+4, "path", h.Path)
			w.list(ind+4, "args", h.Args)
			w.list(ind+4, "env", h.Env)
			if h.Timeout != nil {
				w.num(ind+4, "timeout", int64(*h.Timeout))
			}
		}
	}
	if len(e.Mounts) > 0 {
		w.line(ind, "mounts:")
		for _, m := range e.Mounts {
			w.item(ind+2, "hostPath", m.HostPath)
			w.str(ind+4, "containerPath", m.ContainerPath)
			w.list(ind+4, "options", m.Options)
			w.optStr(ind+4, "type", m.Type)
		}
	}
}

func (w *yamlWriter) indent(n int) {
	for range n {
		w.b = append(w.b, ' ')
	}
}

func (w *yamlWriter) line(ind int, s string) {
	w.indent(ind)
	w.b = append(w.b, s...)
	w.b = append(w.b, '\n')
}

// quoted writes s as a YAML double-quoted scalar. Every character YAML
// does not take literally in one (C0 and C1 controls, DEL, NEL, the line
// and paragraph separators, the byte order mark) is escaped as \uXXXX,
// so the parser reads back exactly s. A string that is not valid UTF-8
// cannot be written; the writer records an error.
func (w *yamlWriter) quoted(s string) {
	if !utf8.ValidString(s) && w.err == nil {
		w.err = fmt.Errorf("spec value %q is not valid UTF-8", s)
	}
	w.b = append(w.b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			w.b = append(w.b, '\\', byte(r))
		case r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x2029 || r == 0xfeff:
			w.b = fmt.Appendf(w.b, "\\u%04x", r)
		default:
			w.b = utf8.AppendRune(w.b, r)
		}
	}
	w.b = append(w.b, '"', '\n')
}

func (w *yamlWriter) str(ind int, key, v string) {
	w.indent(ind)
	w.b = append(w.b, key...)
	w.b = append(w.b, ": "...)
	w.quoted(v)
}

func (w *yamlWriter) optStr(ind int, key, v string) {
	if v != "" {
		w.str(ind, key, v)
	}
}

// item starts a sequence entry whose first key is key.
func (w *yamlWriter) item(ind int, key, v string) {
	w.indent(ind)
	w.b = append(w.b, "- "...)
	w.b = append(w.b, key...)
	w.b = append(w.b, ": "...)
	w.quoted(v)
}

func (w *yamlWriter) num(ind int, key string, v int64) {
	w.indent(ind)
	w.b = append(w.b, key...)
	w.b = append(w.b, ": "...)
	w.b = strconv.AppendInt(w.b, v, 10)
	w.b = append(w.b, '\n')
}

func (w *yamlWriter) list(ind int, key string, vs []string) {
	if len(vs) == 0 {
		return
	}
	w.line(ind, key+":")
	for _, v := range vs {
		w.indent(ind + 2)
		w.b = append(w.b, "- "...)
		w.quoted(v)
	}
}
