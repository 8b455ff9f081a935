package ldcache

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// ErrFormat is wrapped by every error Parse returns: the data is truncated,
// inconsistent, or in a format this package does not write. Callers that
// merge into a container's cache fall back to running ldconfig.
var ErrFormat = errors.New("not an ld.so.cache this package can read")

// Entry flags as ldconfig writes them: the low byte is the library type,
// the high byte the ABI it requires.
const (
	FlagELF          int32 = 0x0001
	FlagELFLibc5     int32 = 0x0002
	FlagELFLibc6     int32 = 0x0003
	FlagTypeMask     int32 = 0x00ff
	FlagX8664Lib64   int32 = 0x0300
	FlagX8664LibX32  int32 = 0x0800
	FlagAArch64Lib64 int32 = 0x0a00
	FlagRequiredMask int32 = 0xff00
)

// HWCapExtension set in Entry.HWCap marks a library from a glibc-hwcaps
// subdirectory: the low 32 bits index Cache.HWCaps and bits 32 to 41 hold
// the x86 ISA level the library needs.
const HWCapExtension uint64 = 1 << 62

const hwcapISALevelMask = 1<<10 - 1

// Entry is one library in the cache.
type Entry struct {
	Flags     int32  // e.g. FlagELFLibc6|FlagX8664Lib64 (0x0303) for x86-64 libraries
	Key       string // the SONAME or file name, e.g. "libcuda.so.1"
	Value     string // the path, e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
	OSVersion uint32
	HWCap     uint64

	// keyAt and valueAt are where Parse found Key and Value in the string
	// table, plus one (0: not parsed), for MarshalKeepingStrings.
	keyAt, valueAt uint32
}

// Cache is the content of an ld.so.cache file.
type Cache struct {
	// Entries in the order the dynamic loader's binary search needs.
	Entries []Entry
	// HWCaps names the glibc-hwcaps subdirectories (e.g. "x86-64-v3")
	// that entries with HWCapExtension refer to by index.
	HWCaps []string
	// Generator names the ldconfig that wrote the cache, e.g. "ldconfig
	// (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36";
	// Marshal writes it back unchanged.
	Generator string

	// interned holds strings stored in the parsed string table that no
	// entry refers to: ldconfig interns the name of every glibc-hwcaps
	// subdirectory it scans, used or not. Marshal keeps them so that a
	// cache parsed and marshalled again is byte for byte the same.
	interned []string

	// strings is the parsed string table; hwcapsAt are where the HWCaps
	// names are in it. MarshalKeepingStrings writes the table back as it
	// is.
	strings  string
	hwcapsAt []uint32
}

const (
	magicOld       = "ld.so-1.7.0"
	magicNew       = "glibc-ld.so.cache1.1"
	headerOldSize  = 16 // magic, padding to 4, nlibs
	entryOldSize   = 12 // flags, key, value
	headerSize     = 48 // magic+version, nlibs, len_strings, flags, 3 padding, extension_offset, 3 unused
	entrySize      = 24 // flags, key, value, osversion, hwcap
	extensionMagic = 0xeaa42174
	sectionSize    = 16 // tag, flags, offset, size
	tagGenerator   = 0
	tagHWCaps      = 1
	endianMask     = 3
	endianUnset    = 0
	endianInvalid  = 1
	endianLittle   = 2
)

var le = binary.LittleEndian

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// Parse reads a cache in the "glibc-ld.so.cache1.1" format, alone or
// appended to the old "ld.so-1.7.0" format as ldconfig -c compat writes it.
// A cache in the old format alone is refused: it lacks the fields the new
// format needs. Every error wraps ErrFormat. Parse copies what it keeps,
// allocates in proportion to len(data), and never reads past it.
func Parse(data []byte) (*Cache, error) {
	base, err := newFormatAt(data)
	if err != nil {
		return nil, err
	}
	return parseNew(data, base)
}

// stringRef asks for the NUL-terminated string at off (relative to the
// new header) to be stored in *dst.
type stringRef struct {
	off uint32
	dst *string
}

// header is the new format's header, checked: its entries and string
// table fit in the file.
type header struct {
	h                                   []byte // from the header to the end of the file
	nlibs, lenStrings, extOff, strStart uint64 // strStart: the string table's offset in h
}

func readHeader(data []byte, base int) (header, error) {
	h := data[base:]
	if len(h) < headerSize {
		return header{}, formatErr("header truncated at %d of %d bytes", len(h), headerSize)
	}
	nlibs := uint64(le.Uint32(h[20:]))
	lenStrings := uint64(le.Uint32(h[24:]))
	switch h[28] & endianMask {
	case endianUnset, endianLittle:
	case endianInvalid:
		return header{}, formatErr("header marks the cache invalid")
	default:
		return header{}, formatErr("big-endian cache")
	}
	if room := uint64(len(h)-headerSize) / entrySize; nlibs > room {
		return header{}, formatErr("header counts %d entries but the %d-byte file has room for %d", nlibs, len(data), room)
	}
	strStart := headerSize + nlibs*entrySize
	if lenStrings > uint64(len(h))-strStart {
		return header{}, formatErr("string table of %d bytes at offset %d runs past the end of the %d-byte file", lenStrings, uint64(base)+strStart, len(data))
	}
	return header{h: h, nlibs: nlibs, lenStrings: lenStrings, extOff: uint64(le.Uint32(h[32:])), strStart: strStart}, nil
}

func parseNew(data []byte, base int) (*Cache, error) {
	hd, err := readHeader(data, base)
	if err != nil {
		return nil, err
	}
	h, nlibs, lenStrings, extOff, strStart := hd.h, hd.nlibs, hd.lenStrings, hd.extOff, hd.strStart
	// One copy of the string table; every key and path is a substring of it.
	tab := string(h[strStart : strStart+lenStrings])

	c := &Cache{Entries: make([]Entry, nlibs), strings: tab}
	refs := make([]stringRef, 0, 2*nlibs)
	for i := range c.Entries {
		p := h[headerSize+uint64(i)*entrySize:]
		e := &c.Entries[i]
		e.Flags = int32(le.Uint32(p))
		key, value := le.Uint32(p[4:]), le.Uint32(p[8:])
		e.OSVersion = le.Uint32(p[12:])
		e.HWCap = le.Uint64(p[16:])
		for _, off := range []uint32{key, value} {
			if uint64(off) < strStart || uint64(off) >= strStart+lenStrings {
				return nil, formatErr("entry %d: string offset %d outside the string table [%d, %d)", i, off, strStart, strStart+lenStrings)
			}
		}
		refs = append(refs, stringRef{key, &e.Key}, stringRef{value, &e.Value})
		e.keyAt, e.valueAt = key-uint32(strStart)+1, value-uint32(strStart)+1
	}

	if extOff != 0 {
		hwcaps, err := c.parseExtensions(data, extOff)
		if err != nil {
			return nil, err
		}
		c.HWCaps = make([]string, len(hwcaps))
		c.hwcapsAt = make([]uint32, len(hwcaps))
		for i, off := range hwcaps {
			if uint64(off) < strStart || uint64(off) >= strStart+lenStrings {
				return nil, formatErr("glibc-hwcaps name %d: string offset %d outside the string table [%d, %d)", i, off, strStart, strStart+lenStrings)
			}
			c.hwcapsAt[i] = off - uint32(strStart)
			refs = append(refs, stringRef{off, &c.HWCaps[i]})
		}
	}
	starts, err := resolveStrings(tab, uint32(strStart), refs)
	if err != nil {
		return nil, err
	}
	for i, e := range c.Entries {
		if isExtension(e.HWCap) && uint64(uint32(e.HWCap)) >= uint64(len(c.HWCaps)) {
			return nil, formatErr("entry %d (%s): glibc-hwcaps index %d out of range (%d names)", i, e.Key, uint32(e.HWCap), len(c.HWCaps))
		}
	}
	c.interned = unreferenced(tab, starts)
	return c, nil
}

// unreferenced returns the strings of tab that no entry refers to: those
// stored from a position not marked in starts. (Strings referred to from
// their middle are still whole strings that ldconfig interned.)
func unreferenced(tab string, starts bitset) []string {
	var out []string
	for start := 0; start < len(tab); {
		j := strings.IndexByte(tab[start:], 0)
		if j < 0 {
			break
		}
		if j > 0 && !starts.has(start) {
			out = append(out, tab[start:start+j])
		}
		start += j + 1
	}
	return out
}

type bitset []uint64

func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }

// parseExtensions reads the extension directory at extOff (relative to the
// start of the file, as the loader reads it) and returns the string offsets
// of the glibc-hwcaps names. Unknown sections are skipped, as glibc does.
func (c *Cache) parseExtensions(data []byte, extOff uint64) ([]uint32, error) {
	size := uint64(len(data))
	if extOff%4 != 0 {
		return nil, formatErr("extension directory offset %d is not a multiple of 4", extOff)
	}
	if extOff+8 > size {
		return nil, formatErr("extension directory at offset %d runs past the end of the %d-byte file", extOff, size)
	}
	if m := le.Uint32(data[extOff:]); m != extensionMagic {
		return nil, formatErr("extension directory at offset %d has magic %#x, want %#x", extOff, m, extensionMagic)
	}
	count := uint64(le.Uint32(data[extOff+4:]))
	if count > (size-extOff-8)/sectionSize {
		return nil, formatErr("extension directory counts %d sections, past the end of the %d-byte file", count, size)
	}
	var hwcaps []uint32
	for i := range count {
		s := data[extOff+8+i*sectionSize:]
		tag, off, n := le.Uint32(s), uint64(le.Uint32(s[8:])), uint64(le.Uint32(s[12:]))
		if off+n > size {
			return nil, formatErr("extension section %d (%d bytes at offset %d) runs past the end of the %d-byte file", i, n, off, size)
		}
		switch tag {
		case tagGenerator:
			c.Generator = string(data[off : off+n])
		case tagHWCaps:
			if off%4 != 0 || n%4 != 0 {
				return nil, formatErr("glibc-hwcaps section (%d bytes at offset %d) is not aligned to 4", n, off)
			}
			hwcaps = make([]uint32, n/4)
			for j := range hwcaps {
				hwcaps[j] = le.Uint32(data[off+uint64(j)*4:])
			}
		}
	}
	return hwcaps, nil
}

// resolveStrings fills each ref with the NUL-terminated string at its
// offset in tab (which starts at offset start) and returns the positions
// in tab that strings start at.
//
// ldconfig stores every string whole and shares only tails (a key is the
// end of its path), so the strings of its caches add up to about twice the
// string table. A hostile file can point thousands of entries into one long
// string; refusing more than eight times the table keeps the scanning here
// and the work of Marshal proportional to the file.
func resolveStrings(tab string, start uint32, refs []stringRef) (bitset, error) {
	starts := make(bitset, (len(tab)+63)/64)
	budget := 8*len(tab) + 1<<16
	for _, r := range refs {
		i := int(r.off - start)
		j := strings.IndexByte(tab[i:], 0)
		if j < 0 {
			return nil, formatErr("string at offset %d runs past the end of the string table", r.off)
		}
		if budget -= j; budget < 0 {
			return nil, formatErr("entries refer to more than %d bytes of strings in a %d-byte string table: not a cache ldconfig wrote", 8*len(tab)+1<<16, len(tab))
		}
		*r.dst = tab[i : i+j]
		starts.set(i)
	}
	return starts, nil
}

func isExtension(hwcap uint64) bool {
	return (hwcap>>32)&^hwcapISALevelMask == HWCapExtension>>32
}

// Lookup returns the entries whose key is exactly key, in cache order (the
// order in which the loader tries them).
func (c *Cache) Lookup(key string) []Entry {
	var out []Entry
	for _, e := range c.Entries {
		if e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

// Add merges entries into the cache. Every existing entry with the same
// Key and Flags as one of the new entries is removed first, so the added
// libraries win over the image's; then each new entry is inserted where
// ldconfig's add_to_cache would put it (after the entries that sort before
// or equal to it), which keeps the order the loader's binary search needs.
// It costs O(n) for the copy plus O(k log n) comparisons.
func (c *Cache) Add(entries ...Entry) {
	keys := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		keys[e.Key] = struct{}{}
	}
	replaced := func(old *Entry) bool {
		if _, ok := keys[old.Key]; ok {
			for _, e := range entries {
				if e.Key == old.Key && e.Flags == old.Flags {
					return true
				}
			}
		}
		return false
	}
	out := make([]Entry, 0, len(c.Entries)+len(entries))
	for i := range c.Entries {
		if !replaced(&c.Entries[i]) {
			out = append(out, c.Entries[i])
		}
	}
	// ldconfig walks its list from the start and inserts before the first
	// entry that sorts after the new one. On a sorted list (any cache
	// ldconfig wrote) a binary search finds that place; the new entries,
	// sorted stably so that equal ones keep the call's order, then go in
	// with one merge. (On a list no ldconfig sorted, the loader's search is
	// unreliable anyway; the positions are kept ascending all the same.)
	add := slices.Clone(entries)
	slices.SortStableFunc(add, func(a, b Entry) int { return c.compare(&a, &b) })
	merged := make([]Entry, 0, len(out)+len(add))
	prev := 0
	for _, e := range add {
		pos := prev + sort.Search(len(out)-prev, func(j int) bool { return c.compare(&out[prev+j], &e) > 0 })
		merged = append(append(merged, out[prev:pos]...), e)
		prev = pos
	}
	out = append(merged, out[prev:]...)
	c.Entries = out
}

// Marshal encodes the cache in the "glibc-ld.so.cache1.1" format exactly as
// glibc 2.36's ldconfig writes it: entries in c.Entries' order, string
// offsets relative to the start of the file, strings tail-merged and laid
// out as ldconfig's string table does, then the extension directory (the
// generator string, and the glibc-hwcaps names that entries use, sorted).
func (c *Cache) Marshal() ([]byte, error) {
	// ldconfig writes only the glibc-hwcaps names in use, sorted by strcmp,
	// and indexes them in that order. Names are collected once per index,
	// not once per entry: a crafted cache can give thousands of entries a
	// few long names, and sorting or searching them per entry costs the
	// entry count times the names' length.
	used := make([]bool, len(c.HWCaps))
	for i, e := range c.Entries {
		if strings.IndexByte(e.Key, 0) >= 0 || strings.IndexByte(e.Value, 0) >= 0 {
			return nil, fmt.Errorf("ld.so.cache entry %d (%q): key or path holds a NUL byte", i, e.Key)
		}
		if isExtension(e.HWCap) {
			idx := uint64(uint32(e.HWCap))
			if idx >= uint64(len(c.HWCaps)) {
				return nil, fmt.Errorf("ld.so.cache entry %d (%s): glibc-hwcaps index %d out of range (%d names)", i, e.Key, idx, len(c.HWCaps))
			}
			used[idx] = true
		}
	}
	var names []string
	for i, u := range used {
		if u {
			names = append(names, c.HWCaps[i])
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	// newIndex maps an index into c.HWCaps to the written name's index.
	newIndex := make([]uint32, len(c.HWCaps))
	for i, u := range used {
		if u {
			idx, _ := slices.BinarySearch(names, c.HWCaps[i])
			newIndex[i] = uint32(idx)
		}
	}
	for _, n := range names {
		if strings.IndexByte(n, 0) >= 0 {
			return nil, fmt.Errorf("ld.so.cache glibc-hwcaps name %q holds a NUL byte", n)
		}
	}

	strs := make([]string, 0, 2*len(c.Entries)+len(names))
	for _, e := range c.Entries {
		strs = append(strs, e.Key, e.Value)
	}
	strs = append(strs, names...)
	strs = append(strs, c.interned...)
	var sum uint64
	for _, s := range strs {
		sum += uint64(len(s)) + 1
	}
	if sum > math.MaxUint32 {
		return nil, fmt.Errorf("ld.so.cache strings total %d bytes, past the format's 4 GiB limit", sum)
	}
	tab, offsets := buildStringTable(strs)
	hwcaps := make([]uint32, len(names))
	for i := range names {
		hwcaps[i] = offsets[2*len(c.Entries)+i]
	}
	return c.encode(tab, offsets, hwcaps, func(hwcap uint64) uint64 {
		return hwcap&^math.MaxUint32 | uint64(newIndex[uint32(hwcap)])
	})
}

// MarshalKeepingStrings encodes the cache in the "glibc-ld.so.cache1.1"
// format as Marshal does, except for the string table: a parsed cache's
// is written back as it was, with the strings of added entries after it,
// where Marshal lays every string out again as ldconfig would (sorting
// some thousand strings). The loader and ldconfig -p read both the same;
// the hook, which merges a driver into every container's cache, saves
// most of the merge. All glibc-hwcaps names are kept, in their order.
// A cache not from Parse is encoded by Marshal.
func (c *Cache) MarshalKeepingStrings() ([]byte, error) {
	if c.strings == "" {
		return c.Marshal()
	}
	tab := []byte(c.strings)
	added := map[string]uint32{}
	// at returns where s is in the table: where Parse found it when it is
	// still there, else appended once.
	at := func(s string, parsed uint32) (uint32, error) {
		if strings.IndexByte(s, 0) >= 0 {
			return 0, fmt.Errorf("ld.so.cache string %q holds a NUL byte", s)
		}
		if p := uint64(parsed); p > 0 && p-1+uint64(len(s)) < uint64(len(c.strings)) && c.strings[p-1:p-1+uint64(len(s))] == s && c.strings[p-1+uint64(len(s))] == 0 {
			return parsed - 1, nil
		}
		if off, ok := added[s]; ok {
			return off, nil
		}
		off := uint64(len(tab))
		if off+uint64(len(s))+1 > math.MaxUint32 {
			return 0, fmt.Errorf("ld.so.cache strings past the format's 4 GiB limit")
		}
		tab = append(append(tab, s...), 0)
		added[s] = uint32(off)
		return uint32(off), nil
	}
	offsets := make([]uint32, 2*len(c.Entries))
	for i := range c.Entries {
		e := &c.Entries[i]
		if isExtension(e.HWCap) && uint64(uint32(e.HWCap)) >= uint64(len(c.HWCaps)) {
			return nil, fmt.Errorf("ld.so.cache entry %d (%s): glibc-hwcaps index %d out of range (%d names)", i, e.Key, uint32(e.HWCap), len(c.HWCaps))
		}
		var err error
		if offsets[2*i], err = at(e.Key, e.keyAt); err != nil {
			return nil, err
		}
		if offsets[2*i+1], err = at(e.Value, e.valueAt); err != nil {
			return nil, err
		}
	}
	hwcaps := make([]uint32, len(c.HWCaps))
	for i, n := range c.HWCaps {
		var parsed uint32
		if i < len(c.hwcapsAt) {
			parsed = c.hwcapsAt[i] + 1
		}
		var err error
		if hwcaps[i], err = at(n, parsed); err != nil {
			return nil, err
		}
	}

	return c.encode(tab, offsets, hwcaps, func(hwcap uint64) uint64 { return hwcap })
}

// encode writes the cache: the entries with their strings at offsets
// (two per entry) in tab, the glibc-hwcaps names at hwcaps in tab, and
// each glibc-hwcaps entry's hwcap field as index gives it.
func (c *Cache) encode(tab []byte, offsets, hwcaps []uint32, index func(hwcap uint64) uint64) ([]byte, error) {
	l, err := newLayout(uint64(len(c.Entries)), uint64(len(tab)), hwcaps, c.Generator)
	if err != nil {
		return nil, err
	}
	buf := l.start()
	for i, e := range c.Entries {
		p := buf[headerSize+uint64(i)*entrySize:]
		le.PutUint32(p, uint32(e.Flags))
		le.PutUint32(p[4:], uint32(l.strStart)+offsets[2*i])
		le.PutUint32(p[8:], uint32(l.strStart)+offsets[2*i+1])
		le.PutUint32(p[12:], e.OSVersion)
		hwcap := e.HWCap
		if isExtension(hwcap) {
			hwcap = index(hwcap)
		}
		le.PutUint64(p[16:], hwcap)
	}
	copy(buf[l.strStart:], tab)
	l.finish(buf)
	return buf, nil
}

// layout places the parts of a cache as ldconfig writes them: header,
// entries, string table, then the extension directory (aligned to 4), the
// glibc-hwcaps names' offsets and the generator string.
type layout struct {
	n, tabLen, strStart, extOff, hwOff, genOff, total uint64
	hwcaps                                            []uint32 // the names' offsets in the string table
	generator                                         string
}

func newLayout(n, tabLen uint64, hwcaps []uint32, generator string) (layout, error) {
	l := layout{n: n, tabLen: tabLen, strStart: headerSize + n*entrySize, hwcaps: hwcaps, generator: generator}
	l.extOff = (l.strStart + tabLen + 3) &^ 3
	l.hwOff = l.extOff + 8 + l.sections()*sectionSize
	l.genOff = l.hwOff + 4*uint64(len(hwcaps))
	l.total = l.genOff + uint64(len(generator))
	if l.total > math.MaxUint32 {
		return layout{}, fmt.Errorf("ld.so.cache of %d entries would be %d bytes, past the format's 4 GiB limit", n, l.total)
	}
	return l, nil
}

func (l layout) sections() uint64 {
	if len(l.hwcaps) > 0 {
		return 2
	}
	return 1
}

// start returns the cache's bytes with the header written.
func (l layout) start() []byte {
	buf := make([]byte, l.total)
	copy(buf, magicNew)
	le.PutUint32(buf[20:], uint32(l.n))
	le.PutUint32(buf[24:], uint32(l.tabLen))
	buf[28] = endianLittle
	le.PutUint32(buf[32:], uint32(l.extOff))
	return buf
}

// finish writes the extension directory and what it points at.
func (l layout) finish(buf []byte) {
	x := buf[l.extOff:]
	le.PutUint32(x, extensionMagic)
	le.PutUint32(x[4:], uint32(l.sections()))
	putSection(x[8:], tagGenerator, l.genOff, uint64(len(l.generator)))
	if len(l.hwcaps) > 0 {
		putSection(x[8+sectionSize:], tagHWCaps, l.hwOff, 4*uint64(len(l.hwcaps)))
		for i, off := range l.hwcaps {
			le.PutUint32(buf[l.hwOff+4*uint64(i):], uint32(l.strStart)+off)
		}
	}
	copy(buf[l.genOff:], l.generator)
}

func putSection(b []byte, tag uint32, off, size uint64) {
	le.PutUint32(b, tag)
	le.PutUint32(b[4:], 0)
	le.PutUint32(b[8:], uint32(off))
	le.PutUint32(b[12:], uint32(size))
}

// buildStringTable lays strings out as ldconfig's stringtable_finalize
// does: distinct strings sorted by their reversed bytes in descending
// order, each string that ends the one before it stored as that one's
// tail. It returns the table and the offset of each of strs in it.
func buildStringTable(strs []string) ([]byte, []uint32) {
	offsets := make([]uint32, len(strs))
	if len(strs) == 0 {
		return nil, offsets
	}
	// Sorting the reversed strings lets the comparisons run on memcmp; the
	// items hold no pointers, which keeps the garbage collector out of it.
	var total int
	for _, s := range strs {
		total += len(s)
	}
	rev := make([]byte, 0, total+8)
	type item struct {
		head          uint64 // the first 8 bytes of rev[off:], zero-padded
		off, len, idx uint32 // rev[off:off+len] is strs[idx] reversed
	}
	items := make([]item, len(strs))
	for i, s := range strs {
		items[i] = item{off: uint32(len(rev)), len: uint32(len(s)), idx: uint32(i)}
		for j := len(s) - 1; j >= 0; j-- {
			rev = append(rev, s[j])
		}
	}
	var pad [8]byte
	for i := range items {
		it := &items[i]
		copy(pad[:], rev[it.off:it.off+min(it.len, 8)])
		clear(pad[min(it.len, 8):])
		it.head = binary.BigEndian.Uint64(pad[:])
	}
	r := func(it item) []byte { return rev[it.off : it.off+it.len] }
	// Most comparisons are settled by the heads; zero padding sorts a
	// shorter string before a longer one that it begins, as bytes.Compare.
	slices.SortFunc(items, func(a, b item) int {
		if a.head != b.head {
			return cmp.Compare(b.head, a.head)
		}
		return bytes.Compare(r(b), r(a))
	})

	tab := make([]byte, 0, total+len(strs))
	var off uint32
	for i, it := range items {
		s := strs[it.idx]
		switch prev := items[max(i-1, 0)]; {
		case i > 0 && bytes.Equal(r(prev), r(it)):
			// The same string again: it has the previous one's offset.
		case i > 0 && bytes.HasPrefix(r(prev), r(it)):
			// A tail of the previous string.
			off += prev.len - it.len
		default:
			off = uint32(len(tab))
			tab = append(append(tab, s...), 0)
		}
		offsets[it.idx] = off
	}
	return tab, offsets
}
