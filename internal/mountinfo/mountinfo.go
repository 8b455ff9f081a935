// Package mountinfo reads the lines of /proc/PID/mountinfo: where each
// mount is and what file system it is, with the kernel's escapes undone.
package mountinfo

import (
	"slices"
	"strconv"
	"strings"
)

// Mount is what gpuctk reads of a mountinfo line.
type Mount struct {
	Point  string // the mount point, in the reader's root
	FSType string // "proc", "tmpfs", ...
}

// Parse reads one line: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS
// [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS. ok is false for a line not of
// that shape.
func Parse(line string) (m Mount, ok bool) {
	fields := strings.Fields(line)
	sep := slices.Index(fields, "-")
	if len(fields) < 6 || sep < 6 || sep+1 >= len(fields) {
		return Mount{}, false
	}
	return Mount{Point: Unescape(fields[4]), FSType: fields[sep+1]}, true
}

// Unescape undoes mountinfo's octal escapes: the kernel writes a space,
// tab, newline or backslash in a path as \040, \011, \012 or \134.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
