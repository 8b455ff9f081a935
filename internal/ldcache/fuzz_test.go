package ldcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse parses arbitrary bytes: Parse must never panic and must fail
// only with ErrFormat; what it accepts must marshal, parse back to the same
// entries, and marshal again to the same bytes. Crashers found are kept in
// testdata/fuzz/FuzzParse and run with every `go test`.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"new.cache", "compat.cache", "old.cache"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(magicNew))
	f.Add([]byte(magicOld))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %q does not wrap ErrFormat", err)
			}
			return
		}
		// MarshalKeepingStrings too must write what reads back the same.
		kept, err := c.MarshalKeepingStrings()
		if err != nil {
			t.Fatalf("MarshalKeepingStrings of a parsed cache: %v", err)
		}
		ck, err := Parse(kept)
		if err != nil {
			t.Fatalf("Parse of MarshalKeepingStrings' output: %v", err)
		}
		sameEntries(t, c, ck)
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a parsed cache: %v", err)
		}
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of Marshal's output: %v", err)
		}
		sameEntries(t, c, c2)
		out2, err := c2.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("Marshal is not stable across a round trip: %s", firstDiff(out2, out))
		}
	})
}

// sameEntries fails unless c2 holds c's entries, glibc-hwcaps names
// included, and its generator.
func sameEntries(t *testing.T, c, c2 *Cache) {
	t.Helper()
	if len(c2.Entries) != len(c.Entries) || c2.Generator != c.Generator {
		t.Fatalf("round trip: %d entries and generator %q, want %d and %q", len(c2.Entries), c2.Generator, len(c.Entries), c.Generator)
	}
	for i, e := range c.Entries {
		e2 := c2.Entries[i]
		n, _ := c.hwcapsName(&e)
		n2, _ := c2.hwcapsName(&e2)
		if e.Flags != e2.Flags || e.Key != e2.Key || e.Value != e2.Value || e.OSVersion != e2.OSVersion ||
			e.HWCap>>32 != e2.HWCap>>32 || (!isExtension(e.HWCap) && e.HWCap != e2.HWCap) || n != n2 {
			t.Fatalf("entry %d: round trip gave %+v (%q), want %+v (%q)", i, e2, n2, e, n)
		}
	}
}
