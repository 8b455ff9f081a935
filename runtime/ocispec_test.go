package runtime

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// decoderOrder is memberOrder the slow way, with encoding/json's tokens.
func decoderOrder(data []byte) []string {
	var keys []string
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return keys
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return keys
		}
		if k := t.(string); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestMemberOrder(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` { } `,
		`{"a":1,"b":2}`,
		"{\n\t\"z\" :\t[1, {\"}\": \"]\"}],\r\n \"a\": \"x\\\"}\" , \"m\":{\"k\":[[],{}]} }",
		`{"a":1,"b":2,"a":3}`,
		`{"\u0070rocess":{"env":[]},"li\"nux":null,"t":true,"f":false,"n":-1.5e+3}`,
		`{"a":"\\","b":"\\\""}`,
		`{"é":"ü","":0}`,
	} {
		if !json.Valid([]byte(doc)) {
			t.Fatalf("test case %q is not JSON", doc)
		}
		got, want := memberOrder([]byte(doc)), decoderOrder([]byte(doc))
		if !slices.Equal(got, want) {
			t.Errorf("memberOrder(%q) = %q, want %q", doc, got, want)
		}
	}
}

// FuzzMemberOrder checks the scanner against encoding/json on any object
// encoding/json accepts.
func FuzzMemberOrder(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":{"c":"}"},"a":[2]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil || m == nil {
			return
		}
		if got, want := memberOrder(data), decoderOrder(data); !slices.Equal(got, want) {
			t.Fatalf("memberOrder(%q) = %q, want %q", data, got, want)
		}
	})
}
