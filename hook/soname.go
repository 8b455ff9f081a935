package hook

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Bounds of what soname reads of a file the image controls: section
// headers (a shared library has about 40), the dynamic section (a few
// hundred entries) and the name itself.
const (
	maxSections   = 4096
	maxDynamic    = 1 << 20
	maxSONAMESize = 4096
)

var errNotLibrary = errors.New("not a shared library for this machine")

// soname returns the DT_SONAME of the ELF file open at fd, of size bytes,
// "" when it has none. It reads, with pread and within bounds, only the
// ELF header, the section headers, the dynamic section and the name: the
// library's own reader (debug/elf) would cost gpuctk-hook its package
// start-up at every container start for the few images that ship
// cuda-compat. Only little-endian 64-bit shared objects of this machine
// are read: those are what the linker cache lists for it.
func soname(fd int, size int64) (string, error) {
	var eh [64]byte
	if err := preadFull(fd, eh[:], 0, size); err != nil {
		return "", err
	}
	le := binary.LittleEndian
	if string(eh[:4]) != "\x7fELF" || eh[4] != 2 || eh[5] != 1 || le.Uint16(eh[16:]) != 3 || le.Uint16(eh[18:]) != elfMachine() {
		return "", errNotLibrary
	}
	shoff, shentsize, shnum := le.Uint64(eh[40:]), le.Uint16(eh[58:]), le.Uint16(eh[60:])
	if shentsize != 64 || shnum == 0 || shnum > maxSections {
		return "", fmt.Errorf("section headers: %w", errNotLibrary)
	}
	sh := make([]byte, int(shnum)*64)
	if err := preadFull(fd, sh, shoff, size); err != nil {
		return "", fmt.Errorf("section headers: %w", err)
	}
	section := func(i uint32) (typ uint32, off, sz uint64, link uint32) {
		h := sh[i*64:]
		return le.Uint32(h[4:]), le.Uint64(h[24:]), le.Uint64(h[32:]), le.Uint32(h[40:])
	}
	for i := range uint32(shnum) {
		typ, off, sz, link := section(i)
		if typ != 6 { // SHT_DYNAMIC
			continue
		}
		if sz > maxDynamic || link >= uint32(shnum) {
			return "", fmt.Errorf("dynamic section: %w", errNotLibrary)
		}
		dyn := make([]byte, sz-sz%16)
		if err := preadFull(fd, dyn, off, size); err != nil {
			return "", fmt.Errorf("dynamic section: %w", err)
		}
		for e := 0; e+16 <= len(dyn); e += 16 {
			tag, val := int64(le.Uint64(dyn[e:])), le.Uint64(dyn[e+8:])
			if tag == 0 { // DT_NULL
				break
			}
			if tag != 14 { // DT_SONAME
				continue
			}
			strTyp, strOff, strSize, _ := section(link)
			if strTyp != 3 || val >= strSize { // SHT_STRTAB
				return "", fmt.Errorf("SONAME: %w", errNotLibrary)
			}
			buf := make([]byte, min(strSize-val, maxSONAMESize))
			if err := preadFull(fd, buf, strOff+val, size); err != nil {
				return "", fmt.Errorf("SONAME: %w", err)
			}
			for n, c := range buf {
				if c == 0 {
					return string(buf[:n]), nil
				}
			}
			return "", fmt.Errorf("SONAME: unterminated: %w", errNotLibrary)
		}
		return "", nil
	}
	return "", nil
}

// preadFull reads len(buf) bytes at off, which must lie within size.
func preadFull(fd int, buf []byte, off uint64, size int64) error {
	if off > uint64(size) || uint64(len(buf)) > uint64(size)-off {
		return fmt.Errorf("past the end of the file: %w", errNotLibrary)
	}
	for done := 0; done < len(buf); {
		n, err := unix.Pread(fd, buf[done:], int64(off)+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("file cut short: %w", errNotLibrary)
		}
		done += n
	}
	return nil
}

// elfMachine is the ELF machine of the libraries the cache is for.
func elfMachine() uint16 {
	if runtime.GOARCH == "arm64" {
		return 183 // EM_AARCH64
	}
	return 62 // EM_X86_64
}
