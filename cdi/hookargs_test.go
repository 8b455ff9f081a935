package cdi

import (
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// TestHookArgs: the spec's one hook call asks for CUDA forward
// compatibility only on hosts whose GPUs all support it, and for the
// params copy from the dev root, each unless the configuration turns it
// off.
func TestHookArgs(t *testing.T) {
	off := false
	for _, tc := range []struct {
		name    string
		gpuName string // replaces every GPU's name when set
		cfg     func(c *config.Config)
		want    []string // argument pairs the call has
		notWant []string // flags it lacks
	}{
		{"data-center GPUs", "", nil,
			[]string{"--cuda-compat 580.65.06", "--nvidia-params /proc/driver/nvidia/params"}, nil},
		{"a GeForce card", "NVIDIA GeForce RTX 4090", nil,
			[]string{"--nvidia-params /proc/driver/nvidia/params"}, []string{"--cuda-compat"}},
		{"cuda-compat = false", "", func(c *config.Config) { c.CDI.CUDACompat = &off },
			[]string{"--nvidia-params /proc/driver/nvidia/params"}, []string{"--cuda-compat"}},
		{"disable-device-node-modification = false", "", func(c *config.Config) { c.CDI.DisableDeviceNodeModification = &off },
			[]string{"--cuda-compat 580.65.06"}, []string{"--nvidia-params"}},
		{"dev root", "", func(c *config.Config) { c.CDI.DevRoot = "/run/nvidia/driver" },
			[]string{"--nvidia-params /run/nvidia/driver/proc/driver/nvidia/params"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := inventory.LoadProfile("l40s")
			if err != nil {
				t.Fatal(err)
			}
			h, _ := p.Host()
			if tc.gpuName != "" {
				for i := range h.GPUs {
					h.GPUs[i].Name = tc.gpuName
				}
			}
			cfg := config.Default()
			if tc.cfg != nil {
				tc.cfg(cfg)
			}
			set, err := offer.Resolve(h, cfg)
			if err != nil {
				t.Fatal(err)
			}
			spec, _, err := ForConfig(cfg).Generate(set, driver.Standard(p.DriverVersion, p.UVMMajor, p.CapsMajor))
			if err != nil {
				t.Fatal(err)
			}
			if n := len(spec.ContainerEdits.Hooks); n != 1 {
				t.Fatalf("%d hook calls, want one", n)
			}
			args := " " + strings.Join(spec.ContainerEdits.Hooks[0].Args, " ") + " "
			for _, w := range tc.want {
				if !strings.Contains(args, " "+w+" ") {
					t.Errorf("hook call lacks %q: %s", w, args)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(args, " "+w+" ") {
					t.Errorf("hook call has %q: %s", w, args)
				}
			}
		})
	}
}
