package ldcache

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Merge returns the cache in data with entries added: the bytes that
// Parse, [Cache.Add] and [Cache.MarshalKeepingStrings] give, in one pass
// over data. The image's entries are copied as they are, with their
// string offsets moved past the longer entry array, instead of being
// decoded into an [Entry] each and encoded again: the hook merges into
// every container's cache, and in its short-lived process each page
// allocated is a page fault (a hook run merging into a cache of 540
// entries allocates 234 KiB in all with Merge, 429 KiB without). Where
// Parse refuses data, Merge
// returns an error wrapping ErrFormat; its other errors are those of
// MarshalKeepingStrings.
func Merge(data []byte, entries ...Entry) ([]byte, error) {
	v, err := view(data)
	if err != nil {
		return nil, err
	}
	if v.tab == "" {
		// No string table to keep: MarshalKeepingStrings lays one out.
		c, err := Parse(data)
		if err != nil {
			return nil, err
		}
		c.Add(entries...)
		return c.MarshalKeepingStrings()
	}

	// What Add removes: the image's entries with the key and flags of an
	// added one.
	keys := make(map[string]bool, len(entries))
	for _, e := range entries {
		keys[e.Key] = true
	}
	keep := make([]int32, 0, v.n)
	for i := range v.n {
		if key := v.key(i); keys[key] {
			flags := v.flags(i)
			if slices.ContainsFunc(entries, func(e Entry) bool { return e.Key == key && e.Flags == flags }) {
				continue
			}
		}
		keep = append(keep, int32(i))
	}
	// Where Add puts each added entry: after the kept entries that sort
	// before or equal to it (see Add).
	c := &Cache{HWCaps: v.hwcaps}
	add := slices.Clone(entries)
	slices.SortStableFunc(add, func(a, b Entry) int { return c.compare(&a, &b) })
	at := make([]int, len(add)) // add[j] goes before keep[at[j]]
	prev := 0
	for j := range add {
		e := &add[j]
		pos := prev + sort.Search(len(keep)-prev, func(k int) bool {
			old := v.entry(int(keep[prev+k]))
			return c.compare(&old, e) > 0
		})
		at[j], prev = pos, pos
	}

	// The added entries' strings go after the image's table, once each,
	// in the order of the entries written.
	n := uint64(len(keep) + len(add))
	strStart := headerSize + n*entrySize
	tabLen := uint64(len(v.tab))
	added := map[string]uint32{}
	var extra []string
	offsets := make([]uint32, 2*len(add))
	for j := range add {
		e := &add[j]
		if isExtension(e.HWCap) && uint64(uint32(e.HWCap)) >= uint64(len(v.hwcaps)) {
			return nil, fmt.Errorf("ld.so.cache entry %s: glibc-hwcaps index %d out of range (%d names)", e.Key, uint32(e.HWCap), len(v.hwcaps))
		}
		for k, s := range []string{e.Key, e.Value} {
			if strings.IndexByte(s, 0) >= 0 {
				return nil, fmt.Errorf("ld.so.cache string %q holds a NUL byte", s)
			}
			off, ok := added[s]
			if !ok {
				if tabLen+uint64(len(s))+1 > math.MaxUint32 {
					return nil, fmt.Errorf("ld.so.cache strings past the format's 4 GiB limit")
				}
				off = uint32(tabLen)
				added[s] = off
				extra = append(extra, s)
				tabLen += uint64(len(s)) + 1
			}
			offsets[2*j+k] = off
		}
	}

	l, err := newLayout(n, tabLen, v.hwcapsAt, v.generator)
	if err != nil {
		return nil, err
	}
	buf := l.start()

	// The image's entries keep their fields; their strings, at the same
	// place in the table, move with the table's start.
	shift := uint32(strStart) - uint32(v.strStart)
	p := buf[headerSize:]
	copyKept := func(from, to int) {
		for _, i := range keep[from:to] {
			copy(p, v.h[headerSize+uint64(i)*entrySize:][:entrySize])
			le.PutUint32(p[4:], le.Uint32(p[4:])+shift)
			le.PutUint32(p[8:], le.Uint32(p[8:])+shift)
			p = p[entrySize:]
		}
	}
	prev = 0
	for j := range add {
		copyKept(prev, at[j])
		prev = at[j]
		e := &add[j]
		le.PutUint32(p, uint32(e.Flags))
		le.PutUint32(p[4:], uint32(strStart)+offsets[2*j])
		le.PutUint32(p[8:], uint32(strStart)+offsets[2*j+1])
		le.PutUint32(p[12:], e.OSVersion)
		le.PutUint64(p[16:], e.HWCap)
		p = p[entrySize:]
	}
	copyKept(prev, len(keep))

	t := buf[strStart:]
	t = t[copy(t, v.tab):]
	for _, s := range extra {
		t = t[copy(t, s)+1:]
	}
	l.finish(buf)
	return buf, nil
}

// cacheView is a cache in the new format, checked as Parse checks it,
// read in place.
type cacheView struct {
	h         []byte // from the new format's header to the end of the file
	n         int    // entries
	strStart  uint64 // the string table's offset in h
	tab       string // the string table, copied once
	hwcaps    []string
	hwcapsAt  []uint32 // the hwcaps names' offsets in tab
	generator string
}

// view checks data as Parse does, refusing what Parse refuses with an
// error wrapping ErrFormat, without decoding its entries.
func view(data []byte) (*cacheView, error) {
	base, err := newFormatAt(data)
	if err != nil {
		return nil, err
	}
	hd, err := readHeader(data, base)
	if err != nil {
		return nil, err
	}
	h, nlibs, lenStrings, extOff, strStart := hd.h, hd.nlibs, hd.lenStrings, hd.extOff, hd.strStart
	v := &cacheView{h: h, n: int(nlibs), strStart: strStart, tab: string(h[strStart : strStart+lenStrings])}
	end := strStart + lenStrings
	// Every string is looked up as Parse's resolveStrings does, within
	// the same budget.
	budget := 8*len(v.tab) + 1<<16
	str := func(off uint32) (string, bool) {
		if uint64(off) < strStart || uint64(off) >= end {
			return "", false
		}
		s := v.tab[uint64(off)-strStart:]
		j := strings.IndexByte(s, 0)
		if j < 0 {
			return "", false
		}
		budget -= j
		return s[:j], budget >= 0
	}
	for i := range v.n {
		p := h[headerSize+uint64(i)*entrySize:]
		for _, off := range []uint32{le.Uint32(p[4:]), le.Uint32(p[8:])} {
			if _, ok := str(off); !ok {
				return nil, formatErr("entry %d: string at offset %d is outside the string table [%d, %d), unterminated, or past the strings' budget", i, off, strStart, end)
			}
		}
	}
	if extOff != 0 {
		var c Cache
		offs, err := c.parseExtensions(data, extOff)
		if err != nil {
			return nil, err
		}
		v.generator = c.Generator
		v.hwcaps = make([]string, len(offs))
		v.hwcapsAt = make([]uint32, len(offs))
		for i, off := range offs {
			s, ok := str(off)
			if !ok {
				return nil, formatErr("glibc-hwcaps name %d: string at offset %d is outside the string table [%d, %d), unterminated, or past the strings' budget", i, off, strStart, end)
			}
			v.hwcaps[i], v.hwcapsAt[i] = s, off-uint32(strStart)
		}
	}
	for i := range v.n {
		if hwcap := v.hwcap(i); isExtension(hwcap) && uint64(uint32(hwcap)) >= uint64(len(v.hwcaps)) {
			return nil, formatErr("entry %d (%s): glibc-hwcaps index %d out of range (%d names)", i, v.key(i), uint32(hwcap), len(v.hwcaps))
		}
	}
	return v, nil
}

// newFormatAt returns where the new format starts in data: at 0, or
// after the old format as ldconfig -c compat writes it (see Parse).
func newFormatAt(data []byte) (int, error) {
	switch {
	case len(data) >= len(magicNew) && string(data[:len(magicNew)]) == magicNew:
		return 0, nil
	case len(data) >= len(magicOld) && string(data[:len(magicOld)]) == magicOld:
		if len(data) < headerOldSize {
			return 0, formatErr("old-format header truncated at %d bytes", len(data))
		}
		n := uint64(le.Uint32(data[12:]))
		if n > uint64(len(data)-headerOldSize)/entryOldSize {
			return 0, formatErr("old-format header counts %d entries but the %d-byte file has room for %d", n, len(data), (len(data)-headerOldSize)/entryOldSize)
		}
		base := (headerOldSize + n*entryOldSize + 7) &^ 7
		if uint64(len(data)) < base+headerSize || string(data[base:base+uint64(len(magicNew))]) != magicNew {
			return 0, formatErr("old %q format without the new %q format", magicOld, magicNew)
		}
		return int(base), nil
	default:
		return 0, formatErr("bad magic: neither %q nor %q", magicNew, magicOld)
	}
}

func (v *cacheView) field(i int) []byte { return v.h[headerSize+uint64(i)*entrySize:] }

func (v *cacheView) flags(i int) int32  { return int32(le.Uint32(v.field(i))) }
func (v *cacheView) hwcap(i int) uint64 { return le.Uint64(v.field(i)[16:]) }

// key returns entry i's key; view checked that it is in the table.
func (v *cacheView) key(i int) string {
	s := v.tab[uint64(le.Uint32(v.field(i)[4:]))-v.strStart:]
	return s[:strings.IndexByte(s, 0)]
}

// entry returns entry i with what compare reads of it.
func (v *cacheView) entry(i int) Entry {
	p := v.field(i)
	return Entry{Flags: int32(le.Uint32(p)), Key: v.key(i), OSVersion: le.Uint32(p[12:]), HWCap: le.Uint64(p[16:])}
}
