// Package quote bounds a value someone else chose (a device ID, a name, a
// path) before it goes into a log line or an error: the message stays one
// short line and says how much was left out.
package quote

import (
	"strconv"
	"unicode/utf8"
)

// Max is the bound messages use: longer than any real device name or
// path, short enough for one line.
const Max = 200

// Cut returns s quoted as %q does, cut to about n bytes of s at a rune's
// start, with the count of bytes left out after it.
func Cut(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strconv.Quote(s[:n]) + "... (" + strconv.Itoa(len(s)-n) + " bytes more)"
}
