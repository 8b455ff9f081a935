package pcibus

import (
	"strings"
	"testing"
)

func TestSysfs(t *testing.T) {
	for _, tc := range []struct {
		nvml, want string
		ok         bool
	}{
		{"00000000:07:00.0", "0000:07:00.0", true},
		{"00000000:C1:00.0", "0000:c1:00.0", true},
		{"0000:c1:00.0", "0000:c1:00.0", true}, // NVML's legacy form, the kernel's own
		{"00000001:00:1F.7", "0001:00:1f.7", true},
		{"00010000:01:00.0", "10000:01:00.0", true}, // VMD: the domain needs 5 digits
		{"10000:01:00.0", "10000:01:00.0", true},
		{"0001A3F0:E1:00.0", "1a3f0:e1:00.0", true},
		{"FFFFFFFF:FF:1F.7", "ffffffff:ff:1f.7", true},
		{"0:07:00.0", "0000:07:00.0", true},
		{"", "", false},
		{"07:00.0", "", false},
		{"000000000:07:00.0", "", false}, // wider than 32 bits
		{"00000000:07:00.8", "", false},
		{"00000000:07:00", "", false},
		{"00000000:7:00.0", "", false},
		{"00000000:07:00.0/..", "", false},
		{"../../../../etc", "", false},
		{"0000:../..:0", "", false},
		{"+0000:07:00.0", "", false},
		{"0x00:07:00.0", "", false},
	} {
		got, ok := Sysfs(tc.nvml)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Sysfs(%q) = %q, %v; want %q, %v", tc.nvml, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzSysfs: whatever Sysfs accepts is a bus id of the kernel's form,
// never a path, and is its own kernel name.
func FuzzSysfs(f *testing.F) {
	for _, s := range []string{"00000000:07:00.0", "00010000:01:00.0", "0000:c1:00.0", "../x:00:00.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		got, ok := Sysfs(id)
		if !ok {
			return
		}
		dom, _, _ := strings.Cut(got, ":")
		if strings.ContainsAny(got, "/ \x00") || len(dom) < 4 || len(dom) > 8 || (len(dom) > 4 && dom[0] == '0') || got != strings.ToLower(got) {
			t.Fatalf("Sysfs(%q) = %q", id, got)
		}
		if again, ok := Sysfs(got); !ok || again != got {
			t.Fatalf("Sysfs(%q) = %q, %v; want it unchanged", got, again, ok)
		}
	})
}
