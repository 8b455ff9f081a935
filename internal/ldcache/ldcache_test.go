package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/ from the real ldconfig")

// TestHostCache parses this machine's /etc/ld.so.cache, and one that
// ldconfig writes now, and checks every entry against what `ldconfig -p`
// prints and the bytes against a Marshal of what was parsed.
func TestHostCache(t *testing.T) {
	need(t, "ldconfig")
	fresh := filepath.Join(t.TempDir(), "ld.so.cache")
	ldconfigIsolated(t, "-X", "-C", fresh)
	for _, path := range []string{"/etc/ld.so.cache", fresh} {
		t.Run(path, func(t *testing.T) {
			c, data := mustParseFile(t, path)
			if len(c.Entries) < 10 {
				t.Fatalf("only %d entries parsed", len(c.Entries))
			}
			want := run(t, "ldconfig", "-p", "-C", path)
			if got := render(c, path); got != want {
				t.Errorf("parsed entries differ from ldconfig -p: %s", diffLines(got, want))
			}
			out, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, data) {
				t.Errorf("Marshal(Parse(%s)) differs from the file: %s", path, firstDiff(out, data))
			}
			// Nothing added: the string table kept is the one Marshal
			// lays out again.
			if kept, err := c.MarshalKeepingStrings(); err != nil || !bytes.Equal(kept, data) {
				t.Errorf("MarshalKeepingStrings(Parse(%s)) differs from the file (%v): %s", path, err, firstDiff(kept, data))
			}
		})
	}
}

// goldenRoot builds a small root file system whose cache has what a host
// cache rarely shows: glibc-hwcaps entries, an unused glibc-hwcaps folder
// (ldconfig still stores its name), digit runs that sort numerically and
// a folder from /etc/ld.so.conf.
func goldenRoot(t *testing.T) string {
	root := t.TempDir()
	b := newLibBuilder(t, "golden")
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	b.write(lib, "libfoo.so.1", "libfoo.so.1.2.3")
	b.write(lib, "libbar.so.9", "libbar.so.9")
	b.write(lib, "libbar.so.10", "libbar.so.10")
	b.write(lib, "libnvidia-ml.so.1", "libnvidia-ml.so.580.65.06")
	b.write(filepath.Join(lib, "glibc-hwcaps/x86-64-v2"), "libfoo.so.1", "libfoo.so.1.2.3")
	b.write(filepath.Join(lib, "glibc-hwcaps/x86-64-v3"), "libfoo.so.1", "libfoo.so.1.2.3")
	if err := os.MkdirAll(filepath.Join(lib, "glibc-hwcaps/x86-64-v4"), 0o755); err != nil {
		t.Fatal(err)
	}
	b.write(filepath.Join(root, "opt/gpu/lib"), "libcuda.so.1", "libcuda.so.580.65.06")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ld.so.conf"), []byte("/opt/gpu/lib\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestGolden checks caches that the real ldconfig wrote (run with -update
// to rewrite them with this machine's ldconfig): what Parse reads must be
// what `ldconfig -p` printed, and Marshal must give back ldconfig's bytes,
// also from the compat format (old with the new appended).
func TestGolden(t *testing.T) {
	if *update {
		need(t, "ldconfig")
		root := goldenRoot(t)
		for _, format := range []string{"new", "compat", "old"} {
			ldconfigIsolated(t, "-X", "-r", root, "-c", format, "-C", "/etc/"+format+".cache")
			data, err := os.ReadFile(filepath.Join(root, "etc", format+".cache"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("testdata", format+".cache"), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		text := run(t, "ldconfig", "-p", "-C", filepath.Join(root, "etc/new.cache"))
		text = strings.Replace(text, filepath.Join(root, "etc/new.cache"), "ld.so.cache", 1)
		if err := os.WriteFile("testdata/new.txt", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/new.txt")
	if err != nil {
		t.Fatal(err)
	}
	newBytes, err := os.ReadFile("testdata/new.cache")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"new.cache", "compat.cache"} {
		t.Run(file, func(t *testing.T) {
			c, _ := mustParseFile(t, filepath.Join("testdata", file))
			if got := render(c, "ld.so.cache"); got != string(want) {
				t.Errorf("parsed entries differ from ldconfig -p: %s", diffLines(got, string(want)))
			}
			if len(c.HWCaps) == 0 || !slices.Contains(c.interned, "x86-64-v4") {
				t.Errorf("glibc-hwcaps names %q, unreferenced strings %q: want x86-64-v2, x86-64-v3 and x86-64-v4", c.HWCaps, c.interned)
			}
			out, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, newBytes) {
				t.Errorf("Marshal differs from ldconfig -c new: %s", firstDiff(out, newBytes))
			}
		})
	}
}

// TestParseErrors feeds truncated, inconsistent and foreign files: each
// must fail with an error wrapping ErrFormat that says what is wrong.
func TestParseErrors(t *testing.T) {
	good, err := os.ReadFile("testdata/new.cache")
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile("testdata/old.cache")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(good); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	nlibs := le.Uint32(good[20:])
	strStart := headerSize + nlibs*entrySize
	strEnd := strStart + le.Uint32(good[24:])
	extOff := le.Uint32(good[32:])
	hwcapsEntry := -1 // the first entry from a glibc-hwcaps folder
	for i := range int(nlibs) {
		if isExtension(le.Uint64(good[headerSize+i*entrySize+16:])) {
			hwcapsEntry = i
			break
		}
	}
	if hwcapsEntry < 0 {
		t.Fatal("testdata/new.cache has no glibc-hwcaps entry")
	}
	// edit returns a copy of good with f applied.
	edit := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	put32 := func(off int, v uint32) []byte { return edit(func(b []byte) { le.PutUint32(b[off:], v) }) }
	tests := []struct {
		name, want string
		data       []byte
	}{
		{"empty", "bad magic", nil},
		{"ELF file", "bad magic", []byte("\x7fELF\x02\x01\x01\x00")},
		{"text", "bad magic", []byte("include /etc/ld.so.conf.d/*.conf\n")},
		{"next version", "bad magic", edit(func(b []byte) { b[19] = '2' })},
		{"magic alone", "header truncated", []byte(magicNew)},
		{"header truncated", "header truncated", good[:headerSize-1]},
		{"entries truncated", "room for", good[:headerSize+entrySize+3]},
		{"strings truncated", "string table", good[:strEnd-1]},
		{"extension truncated", "extension", good[:len(good)-1]},
		{"huge nlibs", "room for", put32(20, 0xffffffff)},
		{"nlibs one too many", "room for", put32(20, nlibs+uint32(len(good)-int(strStart))/entrySize+1)},
		{"huge len_strings", "string table", put32(24, 0xffffffff)},
		{"big endian", "big-endian", edit(func(b []byte) { b[28] = 3 })},
		{"marked invalid", "invalid", edit(func(b []byte) { b[28] = 1 })},
		{"key past the end", "outside the string table", put32(headerSize+4, uint32(len(good)+100))},
		{"key into the header", "outside the string table", put32(headerSize+4, 4)},
		{"value at the table end", "outside the string table", put32(headerSize+entrySize+8, strEnd)},
		{"last string unterminated", "runs past the end", edit(func(b []byte) { b[strEnd-1] = 'x' })},
		{"extension misaligned", "multiple of 4", put32(32, extOff+1)},
		{"extension past the end", "extension directory at offset", put32(32, uint32(len(good)+3)&^3)},
		{"extension bad magic", "magic", put32(int(extOff), 0x12345678)},
		{"huge section count", "counts", put32(int(extOff)+4, 0xfffffff)},
		{"section past the end", "runs past the end", put32(int(extOff)+8+8, uint32(len(good)))},
		{"section size overflow", "runs past the end", put32(int(extOff)+8+12, 0xffffffff)},
		{"hwcaps misaligned", "aligned", put32(int(extOff)+8+sectionSize+8, le.Uint32(good[extOff+8+sectionSize+8:])+2)},
		{"hwcaps name past the table", "glibc-hwcaps name 0", put32(int(le.Uint32(good[extOff+8+sectionSize+8:])), 1)},
		{"hwcaps index out of range", "glibc-hwcaps index 7", put32(headerSize+hwcapsEntry*entrySize+16, 7)},
		{"old format alone", "without the new", old},
		{"old header truncated", "old-format header truncated", []byte(magicOld + "\x00")},
		{"old huge nlibs", "old-format header counts", append([]byte(magicOld+"\x00\xff\xff\xff\xff"), make([]byte, 64)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.data)
			if err == nil {
				t.Fatalf("Parse succeeded with %d entries, want an error", len(c.Entries))
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %q does not wrap ErrFormat", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestLibcmp(t *testing.T) {
	tests := []struct {
		a, b string
		want int // sign
	}{
		{"libfoo.so.1", "libfoo.so.1", 0},
		{"libfoo.so.10", "libfoo.so.9", 1},
		{"libfoo.so.01", "libfoo.so.1", 0}, // numbers, not text
		{"libfoo2.so", "libfoo10.so", -1},
		{"libfoo.so", "libfoo.so.1", -1},
		{"libfoo.so.1", "libfoo.so", 1},
		{"lib1", "liba", 1}, // a digit sorts after any other byte
		{"liba", "lib1", -1},
		{"libA.so", "liba.so", -1},
		{"lib\xc3\xa9.so", "libe.so", -1}, // C's char is signed on x86-64
		{"libbig.so.4294967297", "libbig.so.1", 0},
		{"", "", 0},
		{"", "a", -1},
	}
	if !charSigned {
		tests[9].want = 1
	}
	for _, tt := range tests {
		got := libcmp(tt.a, tt.b)
		if sign(int(got)) != tt.want {
			t.Errorf("libcmp(%q, %q) = %d, want sign %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// TestAddReplaces checks the merge rules on small caches: an added entry
// replaces the image's entries with its key and flags (only those), and
// lands where the loader's binary search looks for it.
func TestAddReplaces(t *testing.T) {
	x64 := FlagELFLibc6 | FlagX8664Lib64
	x32 := FlagELFLibc6 | FlagX8664LibX32
	base := func() *Cache {
		return &Cache{Entries: []Entry{
			{Flags: x64, Key: "libz.so.1", Value: "/lib/libz.so.1"},
			{Flags: x32, Key: "libcuda.so.1", Value: "/usr/libx32/libcuda.so.1"},
			{Flags: x64, Key: "libcuda.so.1", Value: "/usr/lib/old/libcuda.so.1"},
			{Flags: x64, Key: "libc.so.6", Value: "/lib/libc.so.6"},
		}}
	}
	cuda := Entry{Flags: x64, Key: "libcuda.so.1", Value: "/drv/libcuda.so.1"}
	tests := []struct {
		name string
		add  []Entry
		want []string // Key=Value in order
	}{
		{"replace", []Entry{cuda}, []string{"libz.so.1=/lib/libz.so.1", "libcuda.so.1=/usr/libx32/libcuda.so.1", "libcuda.so.1=/drv/libcuda.so.1", "libc.so.6=/lib/libc.so.6"}},
		{"new keys", []Entry{
			{Flags: x64, Key: "libnvidia-ml.so.1", Value: "/drv/libnvidia-ml.so.1"},
			{Flags: x64, Key: "libaaa.so.2", Value: "/drv/libaaa.so.2"},
			{Flags: x64, Key: "libzzz.so.1", Value: "/drv/libzzz.so.1"},
		}, []string{"libzzz.so.1=/drv/libzzz.so.1", "libz.so.1=/lib/libz.so.1", "libnvidia-ml.so.1=/drv/libnvidia-ml.so.1", "libcuda.so.1=/usr/libx32/libcuda.so.1", "libcuda.so.1=/usr/lib/old/libcuda.so.1", "libc.so.6=/lib/libc.so.6", "libaaa.so.2=/drv/libaaa.so.2"}},
		{"replace the other ABI", []Entry{{Flags: x32, Key: "libcuda.so.1", Value: "/drv32/libcuda.so.1"}}, []string{"libz.so.1=/lib/libz.so.1", "libcuda.so.1=/drv32/libcuda.so.1", "libcuda.so.1=/usr/lib/old/libcuda.so.1", "libc.so.6=/lib/libc.so.6"}},
		{"equal entries keep the call's order", []Entry{cuda, {Flags: x64, Key: "libcuda.so.1", Value: "/drv2/libcuda.so.1"}}, []string{"libz.so.1=/lib/libz.so.1", "libcuda.so.1=/usr/libx32/libcuda.so.1", "libcuda.so.1=/drv/libcuda.so.1", "libcuda.so.1=/drv2/libcuda.so.1", "libc.so.6=/lib/libc.so.6"}},
		{"nothing", nil, []string{"libz.so.1=/lib/libz.so.1", "libcuda.so.1=/usr/libx32/libcuda.so.1", "libcuda.so.1=/usr/lib/old/libcuda.so.1", "libc.so.6=/lib/libc.so.6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			c.Add(tt.add...)
			var got []string
			for _, e := range c.Entries {
				got = append(got, e.Key+"="+e.Value)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("entries after Add:\n got %q\nwant %q", got, tt.want)
			}
			if len(tt.add) > 0 {
				if got := c.Lookup(tt.add[0].Key); !slices.Contains(got, tt.add[0]) {
					t.Errorf("Lookup(%s) = %v, want it to hold %v", tt.add[0].Key, got, tt.add[0])
				}
			}
		})
	}
}

// TestParseOverlappingStrings points thousands of entries into one long
// string, each a byte further in, as no ldconfig would: Parse must refuse
// it rather than hand Marshal gigabytes of strings to sort and copy.
func TestParseOverlappingStrings(t *testing.T) {
	const length = 1 << 16
	build := func(n int) []byte {
		strStart := headerSize + n*entrySize
		data := make([]byte, strStart, strStart+length+1)
		copy(data, magicNew)
		le := binary.LittleEndian
		le.PutUint32(data[20:], uint32(n))
		le.PutUint32(data[24:], length+1)
		data[28] = endianLittle
		for i := range n {
			p := data[headerSize+i*entrySize:]
			le.PutUint32(p, uint32(x8664))
			le.PutUint32(p[4:], uint32(strStart+i))
			le.PutUint32(p[8:], uint32(strStart+n-1-i))
		}
		data = append(data, strings.Repeat("a", length)...)
		return append(data, 0)
	}
	_, err := Parse(build(5000))
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "not a cache ldconfig wrote") {
		t.Fatalf("Parse: %v, want the overlapping strings refused", err)
	}
	// A few such entries are fine: ldconfig shares tails too.
	c, err := Parse(build(4))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Entries) != 4 || c.Entries[3].Key != strings.Repeat("a", length-3) || c.Entries[3].Value != strings.Repeat("a", length) {
		t.Errorf("parsed %d entries", len(c.Entries))
	}
}

// TestCraftedHWCapsLinear gives thousands of entries two glibc-hwcaps
// names that are one long run of the same byte, one starting a byte after
// the other: every comparison of the two reads the whole run. Parsing,
// merging into and writing such a 1 MiB cache must take time linear in
// its size (it took minutes when Marshal sorted one name per entry), and
// what Marshal writes must stay within a small multiple of what was read.
func TestCraftedHWCapsLinear(t *testing.T) {
	const n, length = 20000, 512 << 10
	strStart := headerSize + n*entrySize
	tab := "k\x00" + strings.Repeat("a", length) + "\x00"
	extOff := (strStart + len(tab) + 3) &^ 3
	hwOff := extOff + 8 + sectionSize
	data := make([]byte, hwOff+32)
	copy(data, magicNew)
	le := binary.LittleEndian
	le.PutUint32(data[20:], n)
	le.PutUint32(data[24:], uint32(len(tab)))
	data[28] = endianLittle
	le.PutUint32(data[32:], uint32(extOff))
	for i := range n {
		p := data[headerSize+i*entrySize:]
		le.PutUint32(p, uint32(x8664))
		le.PutUint32(p[4:], uint32(strStart))
		le.PutUint32(p[8:], uint32(strStart))
		le.PutUint64(p[16:], HWCapExtension|uint64(i%8))
	}
	copy(data[strStart:], tab)
	le.PutUint32(data[extOff:], extensionMagic)
	le.PutUint32(data[extOff+4:], 1)
	putSection(data[extOff+8:], tagHWCaps, uint64(hwOff), 32)
	for i := range 8 {
		le.PutUint32(data[hwOff+4*i:], uint32(strStart+2+i))
	}

	start := time.Now()
	c, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	c.Add(Entry{Flags: x8664, Key: "libcuda.so.1", Value: "/usr/lib/libcuda.so.1"})
	out, err := c.Marshal()
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("parse, add and marshal of a %d-byte crafted cache took %v, want under 1s", len(data), d)
	}
	if len(out) > 2*len(data)+4096 {
		t.Errorf("Marshal wrote %d bytes from a %d-byte cache", len(out), len(data))
	}
}
