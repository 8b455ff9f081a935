package quote

import (
	"strings"
	"testing"
)

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"0::1", 200, `"0::1"`},
		{strings.Repeat("a", 10), 10, `"aaaaaaaaaa"`},
		{strings.Repeat("a", 11), 10, `"aaaaaaaaaa"... (1 bytes more)`},
		{"ab\ncd", 3, `"ab\n"... (2 bytes more)`},
		// A cut inside a rune goes back to its start.
		{"aéb", 2, `"a"... (3 bytes more)`},
		{strings.Repeat("x", 3<<20), Max, `"` + strings.Repeat("x", Max) + `"... (3145528 bytes more)`},
	} {
		if got := Cut(tc.in, tc.n); got != tc.want {
			t.Errorf("Cut(%.20q, %d) = %.80s, want %.80s", tc.in, tc.n, got, tc.want)
		}
	}
}
