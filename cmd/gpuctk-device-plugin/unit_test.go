package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestUnitAfterMIG: at boot the plugin reads the GPUs and writes the spec
// once gpuctk-mig.service has given them their layout. Ordered only after
// gpuctk-mps.service, it raced the MIG apply when MPS is not enabled (no
// job, so no ordering through it): it advertised the layout before, and
// its devices were not those of the spec the apply wrote.
func TestUnitAfterMIG(t *testing.T) {
	const unit = "../../packaging/gpuctk-device-plugin.service"
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	var after []string
	for _, m := range regexp.MustCompile(`(?m)^After=(.*)$`).FindAllStringSubmatch(string(data), -1) {
		after = append(after, strings.Fields(m[1])...)
	}
	if !slices.Contains(after, "gpuctk-mig.service") {
		t.Errorf("%s: After=%s lacks gpuctk-mig.service", unit, strings.Join(after, " "))
	}
}
