// Package cdientry is the format of gpuctk-runtime's cache entries: the
// devices of the CDI spec dirs as resolved, one file per state of the
// dirs (see runtime/cache.go). It is its own package so that gpuctk's
// `cdi resolve` (internal/cdiresolve, which links the CDI library) and
// gpuctk-runtime (which must not) write the same entries.
package cdientry

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/jsonobj"
)

// Format is an entry's first line; it changes with the format.
const Format = "gpuctk-runtime-cache-3"

// MaxSpecSize bounds a spec file that gpuctk reads: the largest host's
// spec, every replica named, is 550 KiB; a spec dir is writable by other
// tools, so a huge or sparse file must not cost more.
const MaxSpecSize = 8 << 20

// MaxSize bounds an entry: gpuctk-runtime reads none larger (the largest
// host's spec, with every replica name, makes one of about 500 KiB), so
// none larger is written.
const MaxSize = 16 << 20

// Head and End start and end a whole entry: one cut short lacks End.
const (
	Head = Format + "\n"
	End  = "\nend\n"
)

// Spec is one spec of an entry: its kind (vendor/class) and its
// common edits.
type Spec struct {
	Kind  string
	Edits *cdispec.ContainerEdits
	// JSON, where not nil, is Edits encoded already: JSON that decodes
	// to Edits as AppendEdits' does, without a tab or newline. Encode
	// copies it instead of encoding Edits.
	JSON []byte
}

// Device is one device of an entry: its qualified name, the
// index of its spec, its edits.
type Device struct {
	Name  string
	Spec  int
	Edits *cdispec.ContainerEdits
	JSON  []byte // as Spec.JSON
}

// Entry encodes a cache entry: the specs' load errors, the specs (every
// spec the library loaded, in its order per vendor), their devices (by
// name, as the library lists them). `gpuctk cdi resolve` prints one for
// the specs gpuctk-runtime does not read itself.
func Encode(errs []string, specs []Spec, devices []Device) ([]byte, error) {
	// Devices that share edits (a device's names, its replicas) share
	// them as one pointer: encoded once. Encoded first, so that the entry
	// is one allocation of its size: `gpuctk-runtime` makes one in a
	// fresh process, where memory grown by doubling costs a page fault
	// per 4 KiB.
	encoded := map[*cdispec.ContainerEdits][]byte{}
	deviceEdits := make([][]byte, len(devices))
	size := len(Head) + len(End)
	var arena []byte // the encodings, one after the other
	for i, d := range devices {
		js, ok := d.JSON, d.JSON != nil
		if !ok {
			js, ok = encoded[d.Edits]
		}
		if !ok {
			start := len(arena)
			arena = AppendEdits(arena, d.Edits)
			js = arena[start:len(arena):len(arena)]
			encoded[d.Edits] = js
		}
		deviceEdits[i] = js
		size += len("device\t\t\t\n") + len(d.Name) + 4 + len(js)
	}
	specEdits := make([][]byte, len(specs))
	for i, s := range specs {
		specEdits[i] = s.JSON
		if s.JSON == nil {
			specEdits[i] = AppendEdits(nil, s.Edits)
		}
		size += 32 + len(s.Kind) + len(specEdits[i])
	}
	for _, msg := range errs {
		size += 16 + 2*len(msg)
	}
	b := append(make([]byte, 0, size), Head...)
	errs = slices.Sorted(slices.Values(errs))
	for _, msg := range errs {
		b = append(jsonobj.AppendString(append(b, "error\t"...), msg), '\n')
	}
	for id, s := range specs {
		if strings.ContainsAny(s.Kind, "\t\n") {
			return nil, fmt.Errorf("kind %q: not cached", s.Kind)
		}
		b = append(strconv.AppendInt(append(b, "spec\t"...), int64(id), 10), '\t')
		b = append(append(append(append(b, s.Kind...), '\t'), specEdits[id]...), '\n')
	}
	for i, d := range devices {
		if strings.ContainsAny(d.Name, "\t\n") {
			return nil, fmt.Errorf("device name %q: not cached", d.Name)
		}
		b = append(append(b, "device\t"...), d.Name...)
		b = append(strconv.AppendInt(append(b, '\t'), int64(d.Spec), 10), '\t')
		b = append(append(b, deviceEdits[i]...), '\n')
	}
	return append(b, "end\n"...), nil
}
