package mig

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
)

// FuzzConfig feeds arbitrary config files to the parser and the planner:
// neither may panic or take long, errors are one line, and a plan that is
// made, once applied, leaves nothing to do.
func FuzzConfig(f *testing.F) {
	f.Add([]byte("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 2, \"3g.20gb\": 1}\n"))
	f.Add([]byte("version: v1\nmig-configs:\n  a:\n    - devices: [0, 7]\n      device-filter: A100-SXM4-40GB\n      mig-enabled: false\n"))
	f.Add([]byte("version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 9223372036854775807}\n"))
	f.Add([]byte("version: v1\nmig-configs:\n  a:\n    - devices: all\n      device-filter: [\"0x20B010DE\", \"0x20b1\", \"0x233010DE:0x16C010DE\"]\n      mig-enabled: false\n"))
	if data, err := embedded.ReadFile("configs/config-default.yaml"); err == nil {
		f.Add(data) // NVIDIA's file: 81 layouts, PCI device ids
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("f.yaml", data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			return
		}
		p, err := inventory.LoadProfile("dgx-a100")
		if err != nil {
			t.Fatal(err)
		}
		s := &Simulator{profile: p, empty: map[string]map[int]bool{}}
		for _, name := range c.Names() {
			h, _ := s.Host()
			plan, err := Compute(h, c, name)
			if err != nil {
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("error on more than one line: %q", err)
				}
				continue
			}
			if err := Apply(plan, s); err != nil {
				t.Fatalf("config %q: apply of a plan made: %v", name, err)
			}
			h, _ = s.Host()
			if again, err := Compute(h, c, name); err != nil || !again.Empty() {
				t.Fatalf("config %q: second plan: %v %v", name, err, again)
			}
		}
	})
}

// FuzzDeviceID feeds arbitrary device-filter ids to their parser: an id
// it takes is 0x and eight hex digits of NVIDIA's vendor, which it reads
// back whatever the case; anything else is refused in one line.
func FuzzDeviceID(f *testing.F) {
	for _, s := range []string{"0x20B010DE", "0x20b010de", "0X233510DE", "0x20B0", "0x10DE20B0", "548540638", "0x233010DE:0x16C010DE", "0x+20B010D", "0x_20B010DE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := parseDeviceID(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on more than one line: %q", err)
			}
			return
		}
		if want := fmt.Sprintf("0x%08x", id); !strings.EqualFold(s, want) || id&0xFFFF != nvidiaVendor {
			t.Fatalf("%q read as %#x", s, id)
		}
	})
}
