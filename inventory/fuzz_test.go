package inventory

import (
	"os"
	"testing"
)

// FuzzParseProfile feeds arbitrary TOML to the profile parser: a profile
// it accepts must be valid and name its devices without panicking.
func FuzzParseProfile(f *testing.F) {
	for _, name := range Profiles() {
		data, err := os.ReadFile("profiles/" + name + ".toml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Fuzz(func(t *testing.T, data string) {
		p, err := ParseProfile([]byte(data))
		if err != nil {
			return
		}
		h, _ := p.Host()
		if err := h.Validate(); err != nil {
			t.Fatalf("accepted an invalid host: %v", err)
		}
		for _, d := range h.Devices() {
			for _, n := range d.Names() {
				if _, err := h.Select(n); err != nil {
					t.Fatalf("device %s: own name %q: %v", d, n, err)
				}
			}
		}
	})
}

// FuzzSelect feeds arbitrary selectors to a real host.
func FuzzSelect(f *testing.F) {
	p, err := LoadProfile("dgx-a100")
	if err != nil {
		f.Fatal(err)
	}
	h, _ := p.Host()
	for _, s := range []string{"0", "mig-3", "4:0", "1g.5gb", "all", h.GPUs[0].UUID, "mig-", "-1", "4:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sel string) {
		devs, err := h.Select(sel)
		// "gpus", "mig", "all-gpus" and a MIG profile may match nothing
		// (a node of a fleet without them); anything else that selects
		// nothing is an error.
		mayBeEmpty := sel == "gpus" || sel == "mig" || sel == "all-gpus" || profileName.MatchString(sel)
		if err == nil && len(devs) == 0 && !mayBeEmpty {
			t.Fatalf("%q: no devices and no error", sel)
		}
	})
}
