package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// largeSpec writes a spec the size of the largest simulated host's: 8 GPUs,
// 7 MIG devices each, every MIG device shared 8 ways, plus the GPUs.
func largeSpec(b *testing.B, dir string) {
	spec := cdispec.Spec{Version: "0.5.0", Kind: "nvidia.com/gpu"}
	node := func(path string, major, minor int64) *cdispec.DeviceNode {
		return &cdispec.DeviceNode{Path: path, HostPath: path, Type: "c", Major: major, Minor: minor}
	}
	for g := range 8 {
		gpu := node(fmt.Sprintf("/dev/nvidia%d", g), 195, int64(g))
		spec.Devices = append(spec.Devices, cdispec.Device{Name: fmt.Sprint(g), ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{gpu}}})
		for m := range 7 {
			mig := g*7 + m
			gi, ci := 3+g*135+m*9, 4+g*135+m*9
			edits := cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{gpu,
				node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", gi), 511, int64(gi)),
				node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", ci), 511, int64(ci))}}
			for r := range 8 {
				e := edits
				e.Env = []string{fmt.Sprintf("GPUCTK_REPLICA=mig-%d::%d", mig, r)}
				spec.Devices = append(spec.Devices, cdispec.Device{Name: fmt.Sprintf("mig-%d::%d", mig, r), ContainerEdits: e})
			}
		}
	}
	for i := range 60 {
		lib := fmt.Sprintf("/usr/lib/x86_64-linux-gnu/libnvidia-lib%d.so.580.65.06", i)
		spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, &cdispec.Mount{HostPath: lib, ContainerPath: lib, Options: []string{"ro", "nosuid", "nodev", "bind"}})
	}
	data, err := json.Marshal(&spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCreate times the runtime's own work on create, in process and
// without the exec: probe and decode config.json, resolve mig-0 from the
// cache or through the CDI library, apply, write back. The process start
// and the exec, which a whole-process timing adds, are in the tests
// package's BenchmarkRuntimeCreate.
func BenchmarkCreate(b *testing.B) {
	large := b.TempDir()
	largeSpec(b, large)
	for _, bc := range []struct {
		name   string
		large  bool
		cache  bool
		device string
	}{{"small/cache", false, true, "mig-0"}, {"small/no-cache", false, false, "mig-0"},
		{"large/cache", true, true, "mig-0::1"}, {"large/no-cache", true, false, "mig-0::1"}} {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, withEnv(bc.device))
			if bc.large {
				f.rt.cfg.CDI.SpecDirs = []string{large}
			}
			if !bc.cache {
				f.rt.cfg.Runtime.CacheDir = "/dev/null/cache"
			}
			orig, _ := os.ReadFile(f.config)
			args := []string{"create", "--bundle", f.bundle, "ctr1"}
			for b.Loop() {
				if err := os.WriteFile(f.config, orig, 0o600); err != nil {
					b.Fatal(err)
				}
				if err := f.rt.Run(args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("pass-through", func(b *testing.B) {
		f := newFixture(b, nil)
		args := []string{"create", "--bundle", filepath.Clean(f.bundle), "ctr1"}
		for b.Loop() {
			if err := f.rt.Run(args); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGpuctkEntry resolves every device of a golden spec into a
// cache entry: what the first create after a spec change another tool
// made costs gpuctk-runtime.
func BenchmarkGpuctkEntry(b *testing.B) {
	for _, name := range []string{"h100.yaml", "dgx-h100-mig.yaml"} {
		dir := b.TempDir()
		data, err := os.ReadFile(filepath.Join("../cdi/testdata", name))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), data, 0o644); err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := GpuctkEntry([]string{dir}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
