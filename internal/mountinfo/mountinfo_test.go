package mountinfo

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		line string
		want Mount
		ok   bool
	}{
		{"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue", Mount{"/mnt2", "ext3"}, true},
		{"22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw", Mount{"/proc", "proc"}, true},
		// No optional fields.
		{"500 22 0:52 / /run/x rw - tmpfs tmpfs rw", Mount{"/run/x", "tmpfs"}, true},
		{`501 22 0:53 / /run/a\040b\134c rw - tmpfs tmpfs rw`, Mount{`/run/a b\c`, "tmpfs"}, true},
		{"", Mount{}, false},
		{"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 ext3 /dev/root rw", Mount{}, false}, // no separator
		{"36 35 98:0 /mnt1 - ext3", Mount{}, false},                                      // separator too early
		{"36 35 98:0 /mnt1 /mnt2 rw -", Mount{}, false},                                  // no type
	}
	for _, tt := range tests {
		got, ok := Parse(tt.line)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		"/plain":         "/plain",
		`/a\040b`:        "/a b",
		`/tab\011nl\012`: "/tab\tnl\n",
		`/back\134slash`: `/back\slash`,
		`/short\04`:      `/short\04`,
		`/not\9990octal`: `/not\9990octal`,
		`/end\`:          `/end\`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
