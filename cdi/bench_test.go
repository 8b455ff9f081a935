package cdi

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// largestHost is dgx-h100-mig cut to n GPUs: every GPU in MIG mode, 7 x
// 1g.10gb, every MIG device shared 8 ways.
func largestHost(t testing.TB, n int) (*offer.Set, *driver.Files) {
	p, err := inventory.LoadProfile("dgx-h100-mig")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := p.Host()
	h.GPUs = h.GPUs[:n]
	_, set := sharingConfig(t, "dgx-h100-mig", h)
	return set, driver.Standard(p.DriverVersion, p.UVMMajor, p.CapsMajor)
}

// BenchmarkGenerate times building, validating and encoding the spec of
// 1, 2, 4 and 8 GPUs of the largest host, to show the cost is linear.
func BenchmarkGenerate(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) {
			set, files := largestHost(b, n)
			g := New()
			b.ReportAllocs()
			for b.Loop() {
				spec, _, err := g.Generate(set, files)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Marshal(spec, "yaml"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkResolve times what a runtime does per container: load the
// largest host's spec with the CDI library and inject one device.
func BenchmarkResolve(b *testing.B) {
	set, files := largestHost(b, 8)
	spec, _, err := New().Generate(set, files)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for _, format := range []string{"yaml", "json"} {
		data, _ := Marshal(spec, format)
		sub := filepath.Join(dir, format)
		if err := WriteSpec(filepath.Join(sub, "nvidia."+format), data); err != nil {
			b.Fatal(err)
		}
		b.Run("format="+format, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(sub), cdiapi.WithAutoRefresh(false))
				if err != nil {
					b.Fatal(err)
				}
				oci := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
				if _, err := cache.InjectDevices(oci, "nvidia.com/gpu=mig-55::7"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
