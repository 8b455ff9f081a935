// Package cdientry is the format of gpuctk-runtime's cache entries: the
// devices of the CDI spec dirs as resolved, one file per state of the
// dirs (see runtime/cache.go). It is its own package so that gpuctk's
// `cdi resolve` (internal/cdiresolve, which links the CDI library) and
// gpuctk-runtime (which must not) write the same entries.
package cdientry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Format is an entry's first line; it changes with the format.
const Format = "gpuctk-runtime-cache-3"

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
}

// Device is one device of an entry: its qualified name, the
// index of its spec, its edits.
type Device struct {
	Name  string
	Spec  int
	Edits *cdispec.ContainerEdits
}

// Entry encodes a cache entry: the specs' load errors, the specs (every
// spec the library loaded, in its order per vendor), their devices (by
// name, as the library lists them). `gpuctk cdi resolve` prints one for
// the specs gpuctk-runtime does not read itself.
func Encode(errs []string, specs []Spec, devices []Device) ([]byte, error) {
	b := bytes.NewBufferString(Head)
	errs = slices.Sorted(slices.Values(errs))
	for _, msg := range errs {
		js, _ := json.Marshal(msg)
		fmt.Fprintf(b, "error\t%s\n", js)
	}
	for id, s := range specs {
		js, err := json.Marshal(s.Edits)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(s.Kind, "\t\n") {
			return nil, fmt.Errorf("kind %q: not cached", s.Kind)
		}
		fmt.Fprintf(b, "spec\t%d\t%s\t%s\n", id, s.Kind, js)
	}
	// Devices that share edits (a device's names, its replicas) share
	// them as one pointer: encoded once.
	encoded := map[*cdispec.ContainerEdits][]byte{}
	for _, d := range devices {
		if strings.ContainsAny(d.Name, "\t\n") {
			return nil, fmt.Errorf("device name %q: not cached", d.Name)
		}
		js, ok := encoded[d.Edits]
		if !ok {
			var err error
			if js, err = json.Marshal(d.Edits); err != nil {
				return nil, err
			}
			encoded[d.Edits] = js
		}
		fmt.Fprintf(b, "device\t%s\t%d\t%s\n", d.Name, d.Spec, js)
	}
	b.WriteString("end\n")
	return b.Bytes(), nil
}
