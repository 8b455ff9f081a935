package cdi

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// TestGoldenHostLayouts compares the whole spec of an h100 whose driver
// is laid out as real hosts lay it out (see tests/fakehost/README.md)
// with its golden file in testdata/hosts (go test ./cdi -update rewrites
// them): the driver as a prefix on a read-only file system of its own,
// as on the H200 host of docs/hosts.md, and GKE's, found
// through a library search path. The spec is written as a device plugin
// writes it, the host's / seen at the fake root (host-driver-root "/"),
// so the golden files show the host's paths.
func TestGoldenHostLayouts(t *testing.T) {
	fakehost.RequireRoot(t, "a fake driver root has real device nodes (mknod) and the prefix a mount of its own")
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, root string, p *inventory.Profile)
		paths []string
	}{
		{"h100-prefix", func(t *testing.T, root string, p *inventory.Profile) { fakehost.BuildPrefix(t, root, p) }, nil},
		{"h100-gke", func(t *testing.T, root string, p *inventory.Profile) {
			if err := fakehost.BuildGKE(root, p); err != nil {
				t.Fatal(err)
			}
		}, []string{fakehost.GKEPrefix + "/lib64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := inventory.LoadProfile("h100")
			if err != nil {
				t.Fatal(err)
			}
			h, err := p.Host()
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			tc.build(t, root, p)
			cfg := config.Default()
			cfg.CDI.DriverRoot, cfg.CDI.HostDriverRoot, cfg.CDI.LibrarySearchPaths = root, "/", tc.paths
			files, err := driver.Discover(root, root, p.DriverVersion, driver.WithLibrarySearchPaths(tc.paths...))
			if err != nil {
				t.Fatal(err)
			}
			set, err := offer.Resolve(h, cfg)
			if err != nil {
				t.Fatal(err)
			}
			data, _, _, err := Build(set, files, cfg, "yaml")
			if err != nil {
				t.Fatal(err)
			}
			// The device nodes' host paths are under the dev root.
			data = bytes.ReplaceAll(data, []byte(root), []byte("/driver-root"))
			golden := filepath.Join("testdata", "hosts", tc.name+".yaml")
			if *update {
				if err := os.WriteFile(golden, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cdi -update)", err)
			}
			if d := lineDiff(string(want), string(data)); d != "" {
				t.Errorf("spec differs from %s (run go test ./cdi -update and review the diff):\n%s", golden, d)
			}
		})
	}
}
