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

// mergePool is what FuzzMerge and TestMerge add, a subset at a time: a
// driver's libraries, a library every image has (its entry is replaced),
// two entries naming one path, glibc-hwcaps entries in and out of range,
// and a name with a NUL byte, which Marshal refuses.
var mergePool = []Entry{
	{Flags: x8664, Key: "libcuda.so.1", Value: "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
	{Flags: x8664, Key: "libnvidia-ml.so.1", Value: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"},
	{Flags: x8664, Key: "libc.so.6", Value: "/usr/local/cuda/compat/libc.so.6"},
	{Flags: x8664, Key: "libcuda.so.1", Value: "/usr/local/cuda/compat/libcuda.so.1"},
	{Flags: x8664, Key: "libsame.so.1", Value: "libsame.so.1"},
	{Flags: FlagELFLibc6, Key: "libcuda.so.1", Value: "/usr/lib32/libcuda.so.1"},
	{Flags: x8664, Key: "libhw.so.1", Value: "/usr/lib/glibc-hwcaps/x86-64-v3/libhw.so.1", HWCap: HWCapExtension},
	{Flags: x8664, Key: "libhw.so.2", Value: "/usr/lib/libhw.so.2", HWCap: HWCapExtension | 7},
	{Flags: x8664, Key: "libnul\x00.so", Value: "/lib/libnul.so"},
}

// pickEntries returns the entries of mergePool whose bit is set in pick.
func pickEntries(pick uint16) []Entry {
	var out []Entry
	for i, e := range mergePool {
		if pick&(1<<i) != 0 {
			out = append(out, e)
		}
	}
	return out
}

// FuzzMerge holds Merge to the path it replaces: on any input, Parse, Add
// and MarshalKeepingStrings give the same bytes, or both fail, and a
// refusal to read wraps ErrFormat on both.
func FuzzMerge(f *testing.F) {
	for _, name := range []string{"new.cache", "compat.cache", "old.cache"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint16(0x1b))
		f.Add(data, uint16(0x43))
	}
	f.Add([]byte(magicNew), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, pick uint16) {
		entries := pickEntries(pick)
		got, err := Merge(data, entries...)
		want, wantErr := mergeSlow(data, entries)
		switch {
		case wantErr != nil && err == nil:
			t.Fatalf("Merge took what the slower path refuses (%v)", wantErr)
		case wantErr == nil && err != nil:
			t.Fatalf("Merge: %v; the slower path merges", err)
		case err != nil && errors.Is(err, ErrFormat) != errors.Is(wantErr, ErrFormat):
			t.Fatalf("Merge: %v; the slower path: %v", err, wantErr)
		case err == nil && !bytes.Equal(got, want):
			t.Fatalf("Merge differs from Parse, Add and MarshalKeepingStrings: %s", firstDiff(got, want))
		}
	})
}

// mergeSlow is what the hook did before Merge.
func mergeSlow(data []byte, entries []Entry) ([]byte, error) {
	c, err := Parse(data)
	if err != nil {
		return nil, err
	}
	c.Add(entries...)
	return c.MarshalKeepingStrings()
}
