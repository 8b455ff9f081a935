package mig

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctk/gpuctk/inventory"
)

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty", "", "MIG config f.yaml: empty file"},
		{"version", "version: v2\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n", `version is "v2": only v1 is known`},
		{"unknown top key", "version: v1\nmig-config: {}\n", "line 2: field mig-config not found"},
		{"no configs", "version: v1\n", "mig-configs is empty"},
		{"layout not a list", "version: v1\nmig-configs:\n  a: {}\n", `config "a" (line 3): must be a non-empty list of entries`},
		{"unknown field", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enable: true\n", `config "a" entry 1: line 5: unknown field "mig-enable"`},
		{"devices missing", "version: v1\nmig-configs:\n  a:\n    - mig-enabled: true\n", `config "a" entry 1: line 4: field devices is missing`},
		{"mig-enabled missing", "version: v1\nmig-configs:\n  a:\n    - devices: all\n", `config "a" entry 1: line 4: field mig-enabled is missing`},
		{"devices word", "version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n", `config "a" entry 1: field devices: line 4: must be all or a non-empty list of GPU indices`},
		{"negative index", "version: v1\nmig-configs:\n  a:\n    - devices: [-1]\n      mig-enabled: false\n", `field devices: line 4: GPU index -1 is negative`},
		{"mig-enabled type", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: yes please\n", `config "a" entry 1: field mig-enabled: line 5: cannot unmarshal`},
		{"count", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": many}\n", `field mig-devices: line 6: profile 1g.5gb: count "many" is not a whole number of at least 0`},
		{"devices without MIG", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.5gb\": 7}\n", `field mig-devices: MIG devices need mig-enabled: true`},
		{"PCI id not hex", "version: v1\nmig-configs:\n  a:\n  - devices: all\n    device-filter: 0x20B010DG\n    mig-enabled: false\n", `config "a" entry 1: field device-filter: line 5: "0x20B010DG" is not a PCI device id of eight hex digits: write the device and vendor ids as 0x and eight hex digits, such as 0x20B010DE`},
		{"PCI id short", "version: v1\nmig-configs:\n  a:\n  - devices: all\n    device-filter: [\"0x20B010DE\", \"0x20B0\"]\n    mig-enabled: false\n", `config "a" entry 1: field device-filter: line 5: "0x20B0" is not a PCI device id of eight hex digits`},
		{"PCI id long", "version: v1\nmig-configs:\n  a:\n  - devices: all\n    device-filter: 0x20B010DE0\n    mig-enabled: false\n", `"0x20B010DE0" is not a PCI device id of eight hex digits`},
		{"PCI id decimal", "version: v1\nmig-configs:\n  a:\n  - devices: all\n    device-filter: [548540638]\n    mig-enabled: false\n", `config "a" entry 1: field device-filter: line 5: "548540638" is not a PCI device id in hex: write the device and vendor ids as 0x`},
		{"PCI id vendor", "version: v1\nmig-configs:\n  a:\n  - devices: all\n    device-filter: 0x10DE20B0\n    mig-enabled: false\n", `config "a" entry 1: field device-filter: line 5: "0x10DE20B0": vendor id 20B0 is not NVIDIA's (10DE)`},
		{"PCI subsystem id", "version: v1\nmig-configs:\n  a:\n  - devices: all\n    device-filter: 0x233010DE:0x16C010DE\n    mig-enabled: false\n", `field device-filter: line 5: "0x233010DE:0x16C010DE": gpuctk does not match PCI subsystem ids ("0x16C010DE"): drop it to select every "0x233010DE" GPU`},
		{"filter a mapping", "version: v1\nmig-configs:\n  a:\n  - devices: all\n    device-filter: {id: 0x20B010DE}\n    mig-enabled: false\n", `field device-filter: line 5: must be a PCI device id, a product name or a list of them`},
		{"field twice", "version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 7}\n      devices: all\n", `config "a" entry 1: line 7: field devices given twice`},
		{"mig-enabled twice", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n      mig-enabled: true\n", `config "a" entry 1: line 6: field mig-enabled given twice`},
		{"second entry", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n    - devices: [1]\n", `config "a" entry 2: line 6: field mig-enabled is missing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("f.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want one line containing %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "MIG config f.yaml") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

// TestDeviceFilter checks which GPUs a device-filter selects: by PCI
// device id, as mig-parted matches NVML's pciDeviceId (either case, vendor
// included, subsystem ignored), or by product name.
func TestDeviceFilter(t *testing.T) {
	a100 := &inventory.GPU{Index: 0, Name: "NVIDIA A100-SXM4-40GB", PCIDeviceID: 0x20B010DE}
	noID := &inventory.GPU{Index: 1, Name: "NVIDIA A100-SXM4-40GB"}
	h100 := &inventory.GPU{Index: 2, Name: "NVIDIA H100 80GB HBM3", PCIDeviceID: 0x233010DE}
	for _, tc := range []struct {
		filter string
		want   []int // indices of the GPUs selected
	}{
		{`"0x20B010DE"`, []int{0}},
		{`"0x20b010de"`, []int{0}},
		{`"0X20B010DE"`, []int{0}},
		{`["0x233010DE", "0x20B010DE"]`, []int{0, 2}},
		{`"0x20B210DE"`, nil},
		{`"A100-SXM4-40GB"`, []int{0, 1}},
		{`["NVIDIA H100 80GB HBM3", "0x20B010DE"]`, []int{0, 2}},
		{`[]`, []int{0, 1, 2}},
	} {
		t.Run(tc.filter, func(t *testing.T) {
			c, err := ParseConfig("f.yaml", []byte("version: v1\nmig-configs:\n  a:\n    - devices: all\n      device-filter: "+tc.filter+"\n      mig-enabled: false\n"))
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, g := range []*inventory.GPU{a100, noID, h100} {
				if c.Layouts["a"][0].matches(g) {
					got = append(got, g.Index)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("selects GPUs %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEmbeddedConfig(t *testing.T) {
	c, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	// The layouts gpuctk built in before it took NVIDIA's file, and some
	// of the models the file adds.
	for _, name := range []string{"all-disabled", "all-enabled", "all-1g.5gb", "all-1g.10gb", "all-2g.10gb", "all-2g.20gb", "all-3g.20gb", "all-3g.40gb", "all-balanced",
		"all-1g.18gb", "all-3g.71gb", "all-1g.6gb", "all-1g.23gb", "all-1g.12gb"} {
		if !slices.Contains(c.Names(), name) {
			t.Errorf("embedded config lacks %s", name)
		}
	}
	if _, err := c.Layout("all-7g"); err == nil || !strings.Contains(err.Error(), `MIG config embedded config has no config "all-7g": use one of all-1g.10gb,`) {
		t.Errorf("unknown layout: %v", err)
	}
}

// TestLoadConfigNotRegular checks that a device node or a FIFO given as
// the config file is refused at once, not read or waited on.
func TestLoadConfigNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/null", "/dev/zero", fifo} {
		done := make(chan error, 1)
		go func() { _, err := LoadConfig(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || err.Error() != "MIG config "+path+": not a regular file" {
				t.Errorf("%s: got %v", path, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: LoadConfig hangs", path)
		}
	}
}

// TestParseConfigAliases: YAML anchors and aliases, which mig-parted's
// decoder resolves, stand for the layout, entry or value they name.
func TestParseConfigAliases(t *testing.T) {
	c, err := ParseConfig("f.yaml", []byte(`version: v1
mig-configs:
  a: &a
    - devices: [0]
      mig-enabled: &yes true
      mig-devices: &balanced {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
  b: *a
  c:
    - &entry
      devices: &some [2, 3]
      mig-enabled: *yes
      mig-devices: *balanced
  d:
    - *entry
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Entry{Devices: []int{0}, MIGEnabled: true, MIGDevices: map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}
	if !reflect.DeepEqual(c.Layouts["b"], []Entry{want}) {
		t.Errorf("b = %+v, want %+v", c.Layouts["b"], want)
	}
	want.Devices = []int{2, 3}
	for _, name := range []string{"c", "d"} {
		if !reflect.DeepEqual(c.Layouts[name], []Entry{want}) {
			t.Errorf("%s = %+v, want %+v", name, c.Layouts[name], want)
		}
	}
}
