package driver

import "testing"

func FuzzParseMIGMinors(f *testing.F) {
	f.Add("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n")
	f.Add("gpu7/gi14/ci7/access 1079\n")
	f.Fuzz(func(t *testing.T, data string) {
		m, err := ParseMIGMinors([]byte(data))
		if err != nil {
			return
		}
		for k, v := range m {
			if v < 0 || v > 1<<20 || k == "" {
				t.Fatalf("accepted %q -> %d", k, v)
			}
		}
	})
}

func FuzzParseCapability(f *testing.F) {
	f.Add("DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
	f.Fuzz(func(t *testing.T, data string) {
		if m, err := ParseCapability([]byte(data)); err == nil && (m < 0 || m > 1<<20) {
			t.Fatalf("accepted minor %d", m)
		}
	})
}
