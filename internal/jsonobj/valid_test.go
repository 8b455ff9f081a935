package jsonobj

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// validCases are documents json.Valid takes or refuses, at each place the
// grammar can go wrong.
var validCases = []string{
	``, ` `, `{}`, `[]`, ` { } `, `[ ]`, `null`, `true`, `false`, `nul`, `truex`, `"x"`, `"`, `""`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-05`, `1e`, `1e+`, `-1.5e3`, `+1`, `0x1`, `1 2`,
	`{"a":1}`, `{"a" : [1, 2, {"b": null}] }`, `{"a":}`, `{"a" 1}`, `{a:1}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`,
	`[1 2]`, `{"a":1 "b":2}`, `{"a":1}}`, `[[]`, `[]]`, `{"a":[}`, `[{]}`,
	`"\n"`, "\"\n\"", "\"\t\"", `"\"\\\/\b\f\n\r\t"`, `"\u00e4"`, `"\u00E4\uD83D\uDE00"`, `"\u00g4"`, `"\u00e"`, `"\x"`, `"\`,
	"\"\xff\xfe\"", "\"\xc3\xa4\"", "\x00", "[1]\x00", "\ufeff{}",
	`[` + strings.Repeat("[", maxDepth-2) + strings.Repeat("]", maxDepth-1) + `]`,
	`[` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth) + `]`,
	`{"a":` + strings.Repeat(`{"a":`, maxDepth-1) + `1` + strings.Repeat(`}`, maxDepth),
	`{"a":` + strings.Repeat(`{"a":`, maxDepth) + `1` + strings.Repeat(`}`, maxDepth+1),
}

func TestValid(t *testing.T) {
	cases := validCases
	for _, f := range []string{"../../runtime/testdata/config.json", "../../runtime/testdata/env-mig.golden.json"} {
		if data, err := os.ReadFile(f); err == nil {
			cases = append(cases, string(data), string(data[:len(data)/2]))
		}
	}
	for _, doc := range cases {
		if got, want := Valid([]byte(doc)), json.Valid([]byte(doc)); got != want {
			t.Errorf("Valid(%.60q) = %v, json.Valid says %v", doc, got, want)
		}
	}
}

// FuzzValid holds Valid to json.Valid.
func FuzzValid(f *testing.F) {
	for _, doc := range validCases {
		if len(doc) < 1000 {
			f.Add([]byte(doc))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	data, err := os.ReadFile("../../runtime/testdata/config.json")
	if err != nil {
		b.Skip(err)
	}
	b.Run("jsonobj", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			Valid(data)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			json.Valid(data)
		}
	})
}
