package config

import "testing"

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"20GiB", "1", "3 MiB", "18446744073709551615", "16EiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			return
		}
		b, _ := v.MarshalText()
		if w, err := ParseSize(string(b)); err != nil || w != v {
			t.Fatalf("%q -> %d -> %q -> %d, %v", s, v, b, w, err)
		}
	})
}
