package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
)

// bundleSpec is a config.json decoded only as far as CDI edits reach:
// process, mounts, hooks and linux. Every other member is kept as it was,
// byte for byte, including members newer than the runtime-spec we know.
// In a fresh process, encoding/json spends most of its time building its
// per-type tables, and specs.Spec's type tree is large (windows, solaris,
// vm, zos, ...): decoding and encoding only these members costs a third.
type bundleSpec map[string]json.RawMessage

func parseBundleSpec(data []byte) (bundleSpec, error) {
	var b bundleSpec
	if err := json.Unmarshal(data, &b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("not a valid OCI spec: the document is %s %s, want an object", article(te.Value), te.Value)
		}
		return nil, jsonError(data, err)
	}
	return b, nil
}

// decode decodes member key, if present, into dst.
func (b bundleSpec) decode(key string, dst any) error {
	raw, ok := b[key]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return jsonError(raw, prefixField(err, key))
	}
	return nil
}

// set replaces member key with v, or removes it when v is nil.
func (b bundleSpec) set(key string, v any) error {
	if rv := reflect.ValueOf(v); !rv.IsValid() || ((rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Slice) && rv.IsNil()) {
		delete(b, key)
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	b[key] = raw
	return nil
}

// bytes encodes the document, members in name order, each as it was read
// or set.
func (b bundleSpec) bytes() []byte {
	keys := slices.Sorted(maps.Keys(b))
	var out bytes.Buffer
	out.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			out.WriteByte(',')
		}
		name, _ := json.Marshal(k)
		out.Write(name)
		out.WriteByte(':')
		out.Write(b[k])
	}
	out.WriteByte('}')
	return out.Bytes()
}

// prefixField names the member a type error happened in.
func prefixField(err error, key string) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			te.Field = key
		} else {
			te.Field = key + "." + te.Field
		}
	}
	return err
}
