package jsonobj

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// decoderMembers is Parse the slow way, with encoding/json's tokens; ok is
// false where a key repeats under m.
func decoderMembers(data []byte, m Match) (keys []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	seen := map[string]bool{}
	ok = true
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return keys, false
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return keys, false
		}
		k := t.(string)
		norm := k
		if m == Fold {
			norm = strings.ToUpper(strings.ToLower(k))
		}
		if seen[norm] {
			ok = false
		}
		seen[norm] = true
		keys = append(keys, k)
	}
	return keys, ok
}

func keysOf(o *Object) []string {
	var keys []string
	for _, m := range o.Members() {
		keys = append(keys, m.Key)
	}
	return keys
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, doc string
		match     Match
		keys      []string
		wantErr   string
	}{
		{"empty", ` { } `, Fold, nil, ""},
		{"null", `null`, Fold, nil, ""},
		{"order kept", `{"b":1,"a":{"}":"]"},"c":[1,{"x":2}]}`, Fold, []string{"b", "a", "c"}, ""},
		{"spaces everywhere", "{\n\t\"z\" :\t[1, {\"}\": \"]\"}],\r\n \"a\": \"x\\\"}\" , \"n\": -1.5e+3 }", Fold, []string{"z", "a", "n"}, ""},
		{"escaped keys", `{"\u0070rocess":1,"li\"nux":null,"é":"ü","":0}`, Fold, []string{"process", "li\"nux", "é", ""}, ""},
		{"same key twice", `{"a":1,"b":2,"a":3}`, Exact, nil, `duplicate key "a" in the top-level object`},
		{"same key escaped", `{"env":1,"\u0065nv":2}`, Exact, nil, `duplicate key "env"`},
		{"case differs, exact", `{"process":1,"Process":2}`, Exact, []string{"process", "Process"}, ""},
		{"case differs, fold", `{"process":1,"Process":2}`, Fold, nil, `keys "process" and "Process" in the top-level object differ only in letter case`},
		{"long s folds to s", `{"process":1,"proceſs":2}`, Fold, nil, `keys "process" and "proceſs"`},
		{"Kelvin sign folds to k", `{"k":1,"K":2}`, Fold, nil, `keys "k" and "K"`},
		{"array", `[1]`, Fold, nil, "json: cannot unmarshal array into Go value of type map[string]json.RawMessage"},
		{"string", `"x"`, Fold, nil, "cannot unmarshal string"},
		{"invalid", `{"a":1,}`, Fold, nil, "invalid character '}'"},
		{"text after", `{} {}`, Fold, nil, "invalid character '{' after top-level value"},
		{"empty input", ``, Fold, nil, "unexpected end of JSON input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse([]byte(tt.doc), "", tt.match)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%s) error = %v, want one containing %q", tt.doc, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := keysOf(o); !slices.Equal(got, tt.keys) {
				t.Errorf("keys = %q, want %q", got, tt.keys)
			}
			if o != nil && !bytes.Equal(o.Bytes(), []byte(tt.doc)) {
				t.Errorf("Bytes() of an unchanged object = %s, want the input", o.Bytes())
			}
		})
	}
}

func TestEdit(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		edit func(o *Object)
		want string
	}{
		{"replace keeps place", `{"a":1, "b" : 2,"c":3}`, func(o *Object) { o.Set("b", json.RawMessage(`[true]`)) }, `{"a":1,"b":[true],"c":3}`},
		{"insert goes last", `{"a":1}`, func(o *Object) { o.Set("z", json.RawMessage(`"<&>"`)) }, `{"a":1,"z":"<&>"}`},
		{"fold keeps the spelling read", `{"Process":{"env":[]}}`, func(o *Object) { o.Set("process", json.RawMessage(`{}`)) }, `{"Process":{}}`},
		{"delete", `{"a":1,"b":2,"c":3}`, func(o *Object) { o.Delete("a"); o.Set("c", json.RawMessage(`4`)) }, `{"b":2,"c":4}`},
		{"delete then add", `{"a":1,"b":2}`, func(o *Object) { o.Delete("a"); o.Set("a", json.RawMessage(`5`)) }, `{"b":2,"a":5}`},
		{"odd keys encoded", `{}`, func(o *Object) { o.Set("a\"b\n", json.RawMessage(`1`)) }, `{"a\"b\n":1}`},
		{"unknown members byte for byte", `{"future": {"x" : [1,  2]},"a":1}`, func(o *Object) { o.Set("a", json.RawMessage(`2`)) }, `{"future":{"x" : [1,  2]},"a":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse([]byte(tt.doc), "", Fold)
			if err != nil {
				t.Fatal(err)
			}
			tt.edit(o)
			if got := string(o.Bytes()); got != tt.want {
				t.Errorf("Bytes() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestObjectMember(t *testing.T) {
	o, err := Parse([]byte(`{"process":{"user":{"uid":0},"User":1},"linux":null,"n":3}`), "", Fold)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := o.Object("linux", Fold); c != nil || err != nil {
		t.Errorf("Object(null member) = %v, %v; want nil, nil", c, err)
	}
	_, err = o.Object("process", Fold)
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) || dup.Path != "process" || dup.Key != "user" || dup.Other != "User" {
		t.Errorf("Object(process) error = %#v, want a duplicate user in process", err)
	}
	var te *json.UnmarshalTypeError
	if _, err := o.Object("n", Fold); !errors.As(err, &te) || te.Field != "n" || te.Value != "number" {
		t.Errorf("Object(n) error = %v, want a type error naming n", err)
	}
	o.Set("x", json.RawMessage(`{"a":`))
	if _, err := o.Object("x", Fold); err == nil || !strings.HasPrefix(err.Error(), "x: ") {
		t.Errorf("Object of an invalid member set by the caller: error = %v, want one naming x", err)
	}
}

func TestString(t *testing.T) {
	o, err := Parse([]byte(`{"plain":"a/b","escaped":"caf\u00e9 \"x\" \/","null":null,"num":3,"Folded":"f"}`), "doc", Fold)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, want string
		ok, err   bool
	}{
		{"plain", "a/b", true, false},
		{"escaped", `café "x" /`, true, false},
		{"folded", "f", true, false},
		{"null", "", false, false},
		{"absent", "", false, false},
		{"num", "", false, true},
	} {
		s, ok, err := o.String(tc.key)
		if s != tc.want || ok != tc.ok || (err != nil) != tc.err {
			t.Errorf("String(%q) = %q, %v, %v; want %q, %v, error %v", tc.key, s, ok, err, tc.want, tc.ok, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), "doc."+tc.key) {
			t.Errorf("String(%q) error %q does not name doc.%s", tc.key, err, tc.key)
		}
	}
}

func TestCheckKeys(t *testing.T) {
	tests := []struct {
		doc, path string
		match     Match
		wantErr   string
	}{
		{`[{"a":1},{"a":2}]`, "mounts", Fold, ""},
		{`{"a":{"a":{"a":1}},"b":[]}`, "", Fold, ""},
		{`{"Type":"bind","options":["a","a"]}`, "", Fold, ""},
		{`[{"type":"bind"},{"type":"bind","Type":"tmpfs"}]`, "mounts", Fold, `keys "type" and "Type" in mounts[1] differ only in letter case`},
		{`{"prestart":[{"path":"/a","args":[],"path":"/b"}]}`, "hooks", Fold, `duplicate key "path" in hooks.prestart[0]`},
		{`{"x":1,"X":2}`, "annotations", Exact, ""},
		{`{"x":1,"y":{},"x":2}`, "annotations", Exact, `duplicate key "x" in annotations`},
		{`{"a0":0,"a1":1,"a2":2,"a3":3,"a4":4,"a5":5,"a6":6,"a7":7,"a8":8,"a9":9,"b0":0,"b1":1,"b2":2,"b3":3,"b4":4,"b5":5,"b6":6,"b7":7,"A3":1}`, "big", Fold, `keys "a3" and "A3" in big`},
		{`{"a0":0,"a1":1,"a2":2,"a3":3,"a4":4,"a5":5,"a6":6,"a7":7,"a8":8,"a9":9,"b0":0,"b1":1,"b2":2,"b3":3,"b4":4,"b5":5,"b6":6,"b7":7,"b8":1}`, "big", Fold, ``},
	}
	for _, tt := range tests {
		err := CheckKeys([]byte(tt.doc), tt.path, tt.match)
		if tt.wantErr == "" && err != nil {
			t.Errorf("CheckKeys(%s) = %v, want nil", tt.doc, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("CheckKeys(%s) = %v, want an error containing %q", tt.doc, err, tt.wantErr)
		}
	}
}

// FuzzParse checks Parse against encoding/json on any input: the same
// members in the same order, the same verdict on repeated keys, Bytes the
// input itself, and an edited object the document encoding/json reads.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":{"c":"}"},"a":[2]}`, `{"process":{},"Process":1}`, `{"\u00e9":"\\\""}`, `[1]`, `{}`, `{"a":{"b":{"B":1}}}`} {
		f.Add([]byte(s), "k")
	}
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		for _, m := range []Match{Exact, Fold} {
			o, err := Parse(data, "", m)
			var top map[string]json.RawMessage
			if json.Unmarshal(data, &top) != nil {
				if err == nil && o != nil {
					t.Fatalf("Parse(%q) accepted what encoding/json refuses", data)
				}
				continue
			}
			keys, unique := decoderMembers(data, m)
			var dup *DuplicateKeyError
			if errors.As(err, &dup) == unique {
				t.Fatalf("Parse(%q, %d) = %v; encoding/json finds repeated keys: %v", data, m, err, !unique)
			}
			if err != nil || o == nil {
				continue
			}
			if got := keysOf(o); !slices.Equal(got, keys) {
				t.Fatalf("Parse(%q) keys = %q, want %q", data, got, keys)
			}
			if !bytes.Equal(o.Bytes(), data) {
				t.Fatalf("Bytes() of an unchanged object differs from %q", data)
			}
			ckErr := CheckKeys(data, "", m)
			if ckErr == nil && !deepUnique(data, m) || ckErr != nil && deepUnique(data, m) {
				t.Fatalf("CheckKeys(%q, %d) = %v, disagrees with the slow check", data, m, ckErr)
			}
			o.Set(key, json.RawMessage(`"new"`))
			var got map[string]json.RawMessage
			if err := json.Unmarshal(o.Bytes(), &got); err != nil {
				t.Fatalf("edited object %q is not JSON: %v", o.Bytes(), err)
			}
			if v, _ := o.Get(key); string(v) != `"new"` {
				t.Fatalf("Get(%q) after Set = %s", key, v)
			}
			o.Delete(key)
			if _, ok := o.Get(key); ok {
				t.Fatalf("Get(%q) after Delete found it", key)
			}
		}
	})
}

// deepUnique is CheckKeys the slow way: every object at any depth, through
// encoding/json's tokens.
func deepUnique(data []byte, m Match) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	// Numbers as text: one past float64's range is still valid JSON (the
	// fuzzer found one), and keys are all this check is about.
	dec.UseNumber()
	var walk func() bool
	walk = func() bool {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		switch t {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, _ := dec.Token()
				norm := k.(string)
				if m == Fold {
					norm = strings.ToUpper(strings.ToLower(norm))
				}
				if seen[norm] {
					return false
				}
				seen[norm] = true
				if !walk() {
					return false
				}
			}
			dec.Token()
		case json.Delim('['):
			for dec.More() {
				if !walk() {
					return false
				}
			}
			dec.Token()
		}
		return true
	}
	return walk()
}

// FuzzAppendString: AppendString writes any string as encoding/json does.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"<&>\\\x00\u2028\xff\xed\xa0\x80é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: AppendString %s, encoding/json %s", s, got, want)
		}
	})
}
