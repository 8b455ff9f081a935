package quote

import (
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"GPU-0", 200, "GPU-0"},
		{"abcdef", 6, "abcdef"},
		{"abcdef", 3, "abc... (3 bytes more)"},
		{"ééé", 3, "é... (4 bytes more)"}, // not inside a rune
		{"abc", 0, "... (3 bytes more)"},
		{strings.Repeat("x", 3<<20), 5, "xxxxx... (3145723 bytes more)"},
	} {
		if got := Clip(tc.in, tc.n); got != tc.want {
			t.Errorf("Clip(%.20q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestList(t *testing.T) {
	many := make([]string, 75000)
	for i := range many {
		many[i] = "nvidia.com/gpu=" + strings.Repeat("n", i%300)
	}
	for _, tc := range []struct {
		name  string
		items []string
		n     int
		want  string
	}{
		{"none", nil, 3, ""},
		{"under the bound", []string{"a", "b"}, 3, "a, b"},
		{"at the bound", []string{"a", "b", "c"}, 3, "a, b, c"},
		{"over", []string{"a", "b", "c", "d", "e"}, 3, "a, b, c and 2 more"},
		{"nothing shown", []string{"a", "b"}, 0, "2 more"},
		{"each item clipped", []string{strings.Repeat("y", 250)}, 1, strings.Repeat("y", 200) + "... (50 bytes more)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := List(tc.items, tc.n); got != tc.want {
				t.Errorf("List = %q, want %q", got, tc.want)
			}
		})
	}
	// A line, however many names.
	if got := List(many, Items); len(got) > Items*(Bytes+30)+30 || !strings.HasSuffix(got, " and 74988 more") {
		t.Errorf("75,000 items: %d bytes, ends %q", len(got), got[max(0, len(got)-30):])
	}
}

func TestQuoted(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"gpu-0", 200, `"gpu-0"`},
		{"a\nb", 200, `"a\nb"`},
		{"abcdef", 3, `"abc"... (3 bytes more)`},
		{"a\nbcdef", 2, `"a\n"... (5 bytes more)`},
	} {
		if got := Quoted(tc.s, tc.n); got != tc.want {
			t.Errorf("Quoted(%q, %d) = %s, want %s", tc.s, tc.n, got, tc.want)
		}
	}
}
