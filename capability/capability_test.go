package capability

import (
	"reflect"
	"strings"
	"testing"
)

func TestDevices(t *testing.T) {
	all := "capability-graphics capability-video capability-display capability-ngx capability-optix capability-pkcs11 capability-sandboxutils"
	for _, tc := range []struct {
		names, devices, unknown string
	}{
		{"", "", ""},
		{"compute utility", "", ""},
		{"video graphics video", "capability-video capability-graphics", ""},
		{"graphics bogus bogus x", "capability-graphics", "bogus x"},
		{"bogus all ngx", all, ""},
	} {
		d, u := Devices(strings.Fields(tc.names))
		if !reflect.DeepEqual(d, strings.Fields(tc.devices)) && (len(d) != 0 || tc.devices != "") {
			t.Errorf("Devices(%q) = %v, want %q", tc.names, d, tc.devices)
		}
		if !reflect.DeepEqual(u, strings.Fields(tc.unknown)) && (len(u) != 0 || tc.unknown != "") {
			t.Errorf("Devices(%q) unknown = %v, want %q", tc.names, u, tc.unknown)
		}
	}
}
