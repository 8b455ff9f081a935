package ldcache

import (
	"math/bits"
	"runtime"
	"strings"
)

// charSigned is whether C's char is signed on this machine; glibc's
// comparison subtracts chars, so bytes from 0x80 up sort below ASCII on
// x86 and above it on arm64, and the cache must follow the loader reading it.
var charSigned = runtime.GOARCH == "amd64" || runtime.GOARCH == "386"

// byteAt returns s[i] as C reads a NUL-terminated string: 0 past the end.
func byteAt(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func charValue(b byte) int32 {
	if charSigned {
		return int32(int8(b))
	}
	return int32(b)
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// libcmp is glibc's _dl_cache_libcmp: strings compare byte by byte, except
// that runs of digits compare as numbers (so "libfoo.so.10" > "libfoo.so.9"),
// with C's 32-bit int arithmetic, wrap-around included.
func libcmp(a, b string) int32 {
	i, j := 0, 0
	for byteAt(a, i) != 0 {
		ca, cb := byteAt(a, i), byteAt(b, j)
		switch {
		case isDigit(ca) && isDigit(cb):
			var va, vb int32
			for isDigit(byteAt(a, i)) {
				va = va*10 + int32(a[i]-'0')
				i++
			}
			for isDigit(byteAt(b, j)) {
				vb = vb*10 + int32(b[j]-'0')
				j++
			}
			if va != vb {
				return va - vb
			}
		case isDigit(ca):
			return 1
		case isDigit(cb):
			return -1
		case ca != cb:
			return charValue(ca) - charValue(cb)
		default:
			i++
			j++
		}
	}
	return charValue(byteAt(a, i)) - charValue(byteAt(b, j))
}

// hwcapsName returns the glibc-hwcaps subdirectory of e, if it has one.
func (c *Cache) hwcapsName(e *Entry) (string, bool) {
	if !isExtension(e.HWCap) {
		return "", false
	}
	if idx := uint64(uint32(e.HWCap)); idx < uint64(len(c.HWCaps)) {
		return c.HWCaps[idx], true
	}
	return "", true
}

// compare is ldconfig's compare(e1, e2) from elf/cache.c: positive when a
// must come after b. Names sort in descending libcmp order (the loader's
// binary search relies on it), then flags descending, glibc-hwcaps entries
// first and by name, then the most specific hwcap, then OS version.
func (c *Cache) compare(a, b *Entry) int {
	if r := libcmp(b.Key, a.Key); r != 0 {
		return int(r)
	}
	switch {
	case a.Flags < b.Flags:
		return 1
	case a.Flags > b.Flags:
		return -1
	}
	an, aext := c.hwcapsName(a)
	bn, bext := c.hwcapsName(b)
	switch {
	case aext && !bext:
		return -1
	case !aext && bext:
		return 1
	case aext && bext:
		if r := strings.Compare(an, bn); r != 0 {
			return r
		}
	}
	// ldconfig keeps hwcap zero for glibc-hwcaps entries until it writes them.
	ah, bh := a.HWCap, b.HWCap
	if aext {
		ah, bh = 0, 0
	}
	if ab, bb := bits.OnesCount64(ah), bits.OnesCount64(bh); ab != bb {
		return bb - ab
	}
	switch {
	case bh > ah:
		return 1
	case bh < ah:
		return -1
	case b.OSVersion > a.OSVersion:
		return 1
	case b.OSVersion < a.OSVersion:
		return -1
	}
	return 0
}
