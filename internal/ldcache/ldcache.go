// Package ldcache reads glibc's /etc/ld.so.cache. (Placeholder reader for
// the new format; replaced by the full reader and writer.)
package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrFormat is wrapped by every error about the content of a cache.
var ErrFormat = errors.New("not a glibc ld.so.cache")

// Entry is one library in the cache.
type Entry struct {
	Flags     int32
	Key       string
	Value     string
	OSVersion uint32
	HWCap     uint64
}

// Cache is a parsed cache.
type Cache struct{ Entries []Entry }

const magicNew = "glibc-ld.so.cache1.1"

// Parse reads a cache in the new format.
func Parse(data []byte) (*Cache, error) {
	if len(data) < 48 || string(data[:20]) != magicNew {
		return nil, fmt.Errorf("%w: bad header", ErrFormat)
	}
	n := binary.LittleEndian.Uint32(data[20:])
	if uint64(n)*24+48 > uint64(len(data)) {
		return nil, fmt.Errorf("%w: %d entries do not fit", ErrFormat, n)
	}
	str := func(off uint32) (string, error) {
		if uint64(off) >= uint64(len(data)) {
			return "", fmt.Errorf("%w: string offset %d out of range", ErrFormat, off)
		}
		end := bytes.IndexByte(data[off:], 0)
		if end < 0 {
			return "", fmt.Errorf("%w: unterminated string", ErrFormat)
		}
		return string(data[off : int(off)+end]), nil
	}
	c := &Cache{}
	for i := uint32(0); i < n; i++ {
		e := data[48+24*i:]
		k, err := str(binary.LittleEndian.Uint32(e[4:]))
		if err != nil {
			return nil, err
		}
		v, err := str(binary.LittleEndian.Uint32(e[8:]))
		if err != nil {
			return nil, err
		}
		c.Entries = append(c.Entries, Entry{Flags: int32(binary.LittleEndian.Uint32(e)), Key: k, Value: v,
			OSVersion: binary.LittleEndian.Uint32(e[12:]), HWCap: binary.LittleEndian.Uint64(e[16:])})
	}
	return c, nil
}

// Lookup returns the entries for a key.
func (c *Cache) Lookup(key string) []Entry {
	var out []Entry
	for _, e := range c.Entries {
		if e.Key == key {
			out = append(out, e)
		}
	}
	return out
}
