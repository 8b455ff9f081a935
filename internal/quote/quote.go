// Package quote bounds what a message quotes of input that others chose:
// an ID, a name or a list of them goes into a log line or an error cut
// to a bound, with a count of what was left out, so that a 3 MB device
// ID or 75,000 names make one readable line, not megabytes.
package quote

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bytes is the bound Clip callers use for one ID, name or path.
const Bytes = 200

// Items is the bound List callers use for the items of one message.
const Items = 12

// Clip returns s cut to at most n bytes, at a rune's start, followed by
// "... (N bytes more)" when anything was cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "... (" + strconv.Itoa(len(s)-n) + " bytes more)"
}

// List joins at most n items with ", ", each clipped to Bytes, followed by
// " and N more" when items were left out.
func List(items []string, n int) string {
	n = max(min(n, len(items)), 0)
	var b strings.Builder
	for i, item := range items[:n] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(Clip(item, Bytes))
	}
	if more := len(items) - n; more > 0 {
		if n > 0 {
			b.WriteString(" and ")
		}
		b.WriteString(strconv.Itoa(more) + " more")
	}
	return b.String()
}

// Quoted is Clip with the part kept quoted as %q quotes it: for an ID that
// may hold anything (a newline, an escape), in a message of one line.
func Quoted(s string, n int) string {
	c := Clip(s, n)
	if len(c) == len(s) {
		return strconv.Quote(s)
	}
	kept := c[:strings.LastIndex(c, "... (")]
	return strconv.Quote(kept) + c[len(kept):]
}
