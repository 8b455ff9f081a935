package mig

import (
	"os"
	"regexp"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
)

// TestDocumentedLayouts plans every layout of each mig-parted config the
// README shows (its ```yaml blocks with mig-configs) on the embedded DGX
// A100 it is written for: an example that is refused is a broken promise.
func TestDocumentedLayouts(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	p, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Host()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(readme, -1) {
		if !regexp.MustCompile(`(?m)^mig-configs:`).Match(b[1]) {
			continue
		}
		cfg, err := ParseConfig("README.md", b[1])
		if err != nil {
			t.Errorf("README.md mig config: %v", err)
			continue
		}
		for _, name := range cfg.Names() {
			n++
			if _, err := Compute(h, cfg, name); err != nil {
				t.Errorf("README.md layout %q on dgx-a100: %v", name, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("README.md shows no mig-parted layout")
	}
}
