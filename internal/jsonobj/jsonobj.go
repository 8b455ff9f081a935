package jsonobj

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"unicode"
	"unicode/utf8"

	"github.com/gpuctk/gpuctk/internal/quote"
)

// Match says which keys are the same key.
type Match int

const (
	// Exact keys are equal byte for byte: the keys of a JSON object
	// decoded into a Go map.
	Exact Match = iota
	// Fold keys are equal as encoding/json matches a key to a struct
	// field: ignoring letter case, with Unicode's simple folding (so "ſ",
	// the long s, is an "s").
	Fold
)

// Member is one member of an object.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Object is a JSON object being edited. The zero value is not usable; a
// nil *Object is an absent or null object with no members.
type Object struct {
	path    string // for messages: "" is the document, else "process.user"
	match   Match
	data    []byte // as read; nil when made by New or once changed
	members []Member
	// trusted[i] says members[i] came from a document Valid accepted, so
	// Object does not validate it again.
	trusted []bool
	index   map[string]int // by key, folded in Fold mode
}

// DuplicateKeyError is a key that appears twice in one object, or two keys
// that a Fold object takes for the same one.
type DuplicateKeyError struct {
	Path  string // the object's path; "" is the document itself
	Key   string // the first spelling
	Other string // the second, equal to Key when it is the same key twice
}

func (e *DuplicateKeyError) Error() string {
	where := "the top-level object"
	if e.Path != "" {
		where = quote.Clip(e.Path, quote.Bytes)
	}
	if e.Key == e.Other {
		return fmt.Sprintf("duplicate key %q in %s: decoders disagree on which value counts; keep one", quote.Clip(e.Key, quote.Bytes), where)
	}
	return fmt.Sprintf("keys %q and %q in %s differ only in letter case and name the same member to Go's encoding/json (and runc); keep one",
		quote.Clip(e.Key, quote.Bytes), quote.Clip(e.Other, quote.Bytes), where)
}

var objectType = reflect.TypeFor[map[string]json.RawMessage]()

// New returns an empty object at path.
func New(path string, m Match) *Object {
	return &Object{path: path, match: m, index: map[string]int{}}
}

// Parse decodes data, which must be a JSON object or null (a nil Object,
// no error), as the object at path. Errors are *json.SyntaxError for
// invalid JSON, *json.UnmarshalTypeError (Field is path) for another kind
// of value, and *DuplicateKeyError.
func Parse(data []byte, path string, m Match) (*Object, error) {
	if !Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		if err == nil { // never expected: Valid and Unmarshal disagree
			err = &json.SyntaxError{}
		}
		return nil, err
	}
	return parse(data, path, m)
}

// parse splits data, valid JSON, into members.
func parse(data []byte, path string, m Match) (*Object, error) {
	i := skipSpace(data, 0)
	switch data[i] {
	case 'n':
		return nil, nil
	case '{':
	default:
		return nil, &json.UnmarshalTypeError{Value: kindOf(data[i]), Type: objectType, Field: path, Offset: int64(i)}
	}
	o := &Object{path: path, match: m, data: data}
	for i++; ; {
		i = skipSpace(data, i)
		if data[i] == '}' {
			break
		}
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
		end := stringEnd(data, i)
		key := decodeKey(data[i:end])
		i = skipSpace(data, end) + 1 // past ':'
		i = skipSpace(data, i)
		end = valueEnd(data, i)
		o.members = append(o.members, Member{Key: key, Value: data[i:end]})
		o.trusted = append(o.trusted, true)
		i = end
	}
	o.index = make(map[string]int, len(o.members))
	for n, mb := range o.members {
		k := o.norm(mb.Key)
		if first, ok := o.index[k]; ok {
			return nil, &DuplicateKeyError{Path: path, Key: o.members[first].Key, Other: mb.Key}
		}
		o.index[k] = n
	}
	return o, nil
}

func kindOf(c byte) string {
	switch c {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// decodeKey decodes a JSON string known to be valid, as encoding/json does
// (invalid UTF-8 becomes U+FFFD).
func decodeKey(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1])
	}
	var k string
	json.Unmarshal(raw, &k)
	return k
}

func (o *Object) norm(key string) string {
	if o.match == Fold {
		return fold(key)
	}
	return key
}

// fold maps key to the form under which encoding/json matches it to a
// field name: ASCII letters in upper case, other runes upper(lower(r)).
func fold(key string) string {
	ascii := true
	for i := 0; i < len(key); i++ {
		if c := key[i]; c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		if !hasLower(key) {
			return key
		}
		b := []byte(key)
		for i, c := range b {
			if 'a' <= c && c <= 'z' {
				b[i] = c - 'a' + 'A'
			}
		}
		return string(b)
	}
	b := make([]byte, 0, len(key))
	for _, r := range key {
		b = utf8.AppendRune(b, unicode.ToUpper(unicode.ToLower(r)))
	}
	return string(b)
}

func hasLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return true
		}
	}
	return false
}

// Path is the object's path, for messages.
func (o *Object) Path() string {
	if o == nil {
		return ""
	}
	return o.path
}

// MemberPath is the path of member key, for messages.
func (o *Object) MemberPath(key string) string {
	if o == nil || o.path == "" {
		return key
	}
	return o.path + "." + key
}

// Len is the number of members.
func (o *Object) Len() int {
	if o == nil {
		return 0
	}
	return len(o.members)
}

// Members returns the members in order; the caller must not change them.
func (o *Object) Members() []Member {
	if o == nil {
		return nil
	}
	return o.members
}

// Get returns member key. In Fold mode a member spelled otherwise (e.g.
// "Process" for "process") is the same member, as to encoding/json.
func (o *Object) Get(key string) (json.RawMessage, bool) {
	if o == nil {
		return nil, false
	}
	n, ok := o.index[o.norm(key)]
	if !ok {
		return nil, false
	}
	return o.members[n].Value, true
}

// String returns member key, a JSON string, decoded as encoding/json
// decodes it: ok is false when the member is absent or null, and another
// kind of value is an error naming the member.
func (o *Object) String(key string) (s string, ok bool, err error) {
	raw, ok := o.Get(key)
	if !ok || string(raw) == "null" {
		return "", false, nil
	}
	if len(raw) == 0 || raw[0] != '"' {
		kind := "nothing"
		if len(raw) > 0 {
			kind = kindOf(raw[0])
		}
		return "", false, &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeFor[string](), Field: o.MemberPath(key)}
	}
	return decodeKey(raw), true, nil
}

// Object parses member key as an object of the given match: nil when the
// member is absent or null.
func (o *Object) Object(key string, m Match) (*Object, error) {
	if o == nil {
		return nil, nil
	}
	n, ok := o.index[o.norm(key)]
	if !ok {
		return nil, nil
	}
	path := o.MemberPath(o.members[n].Key)
	if o.trusted[n] {
		return parse(o.members[n].Value, path, m)
	}
	c, err := Parse(o.members[n].Value, path, m)
	if err != nil {
		return nil, prefix(err, path)
	}
	return c, nil
}

// prefix names path in a syntax error of a member set by the caller.
func prefix(err error, path string) error {
	if se, ok := err.(*json.SyntaxError); ok {
		return fmt.Errorf("%s: %w", path, se)
	}
	return err
}

// Set replaces member key, keeping its place and, in Fold mode, its
// spelling, or adds it after the others. value must be one valid JSON
// value; Bytes writes it as it is.
func (o *Object) Set(key string, value json.RawMessage) {
	o.data = nil
	if n, ok := o.index[o.norm(key)]; ok {
		o.members[n].Value = value
		o.trusted[n] = false
		return
	}
	o.index[o.norm(key)] = len(o.members)
	o.members = append(o.members, Member{Key: key, Value: value})
	o.trusted = append(o.trusted, false)
}

// Delete removes member key; it reports whether there was one.
func (o *Object) Delete(key string) bool {
	k := o.norm(key)
	n, ok := o.index[k]
	if !ok {
		return false
	}
	o.data = nil
	o.members = append(o.members[:n], o.members[n+1:]...)
	o.trusted = append(o.trusted[:n], o.trusted[n+1:]...)
	delete(o.index, k)
	for i := n; i < len(o.members); i++ {
		o.index[o.norm(o.members[i].Key)] = i
	}
	return true
}

// Bytes encodes the object: the bytes it was read as when nothing changed,
// else its members in order, compactly separated.
func (o *Object) Bytes() []byte {
	if o == nil {
		return []byte("null")
	}
	if o.data != nil {
		return o.data
	}
	size := 2
	for _, m := range o.members {
		size += len(m.Key) + len(m.Value) + 4
	}
	out := make([]byte, 0, size)
	out = append(out, '{')
	for i, m := range o.members {
		if i > 0 {
			out = append(out, ',')
		}
		out = AppendString(out, m.Key)
		out = append(out, ':')
		out = append(out, m.Value...)
	}
	return append(out, '}')
}

// AppendStrings appends list as encoding/json encodes a []string: nil as
// null, each string as AppendString writes it.
func AppendStrings(b []byte, list []string) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// AppendString appends s as encoding/json encodes a string with HTML escaping,
// its default: quotes, backslashes, control characters, <, > and &
// escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Indent is Bytes indented as a person would write the file, with a final
// newline.
func (o *Object) Indent(indent string) []byte {
	var b bytes.Buffer
	json.Indent(&b, o.Bytes(), "", indent)
	b.WriteByte('\n')
	return b.Bytes()
}
