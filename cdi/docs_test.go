package cdi

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// TestDocumentedConfigs generates a spec with every config a user is shown
// (each ```toml block of the README, and the packaged config.toml with
// every setting uncommented) on every embedded profile, and maps it to
// the device plugin's resources: an example that
// fails anywhere is a broken promise.
func TestDocumentedConfigs(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile("../packaging/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string][]byte{
		"packaging/config.toml uncommented": regexp.MustCompile(`(?m)^#([\[a-z])`).ReplaceAll(shipped, []byte("$1")),
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```toml block")
	}
	for i, b := range blocks {
		configs["README.md toml block "+string(rune('1'+i))] = b[1]
	}
	for name, data := range configs {
		cfg, err := config.Parse(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, profile := range inventory.Profiles() {
			p, err := inventory.LoadProfile(profile)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := p.Host()
			set, err := offer.Resolve(h, cfg)
			if err != nil {
				t.Errorf("%s on %s: %v", name, profile, err)
				continue
			}
			for _, w := range set.Warnings {
				if strings.Contains(w, "pools devices") {
					t.Errorf("%s on %s: %s", name, profile, w)
				}
			}
			if _, _, err := ForConfig(cfg).Generate(set, driver.Standard(p.DriverVersion, p.UVMMajor, p.CapsMajor)); err != nil {
				t.Errorf("%s on %s: %v", name, profile, err)
			}
		}
	}
}
