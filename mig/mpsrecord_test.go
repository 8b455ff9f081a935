package mig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// A GPU an MPS daemon serves is not changed: the state root's device.json
// is written the way package mps writes it (an offer.Share and the
// daemon's pid), for a daemon on a MIG device and on a whole GPU.
func TestRefuseMPSRecord(t *testing.T) {
	cfg := embeddedConfig(t)
	for _, tc := range []struct {
		name   string
		device func(h *inventory.Host) inventory.Device
		layout string
		want   string
	}{
		{"MIG device", func(h *inventory.Host) inventory.Device {
			return inventory.Device{GPU: &h.GPUs[5], MIG: &h.GPUs[5].MIG[1], Ordinal: 8}
		}, "all-1g.5gb", "GPU 5 (GPU-e4260e38-b731-4f6f-8826-e1320234be3a): an MPS daemon serves"},
		{"whole GPU", func(h *inventory.Host) inventory.Device {
			return inventory.Device{GPU: &h.GPUs[0], Ordinal: -1}
		}, "all-1g.5gb", "GPU 0 (GPU-13fe3248-4da8-65f8-e972-3f15eef51793): an MPS daemon serves"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := simulator(t, "dgx-a100")
			before := host(t, s)
			p, err := Compute(before, cfg, tc.layout)
			if err != nil {
				t.Fatal(err)
			}
			d := tc.device(before)
			rec := struct {
				offer.Share
				PID int `json:"daemonPID,omitempty"`
			}{offer.Share{Device: d, Strategy: "mps", Replicas: 2}, 4242}
			data, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			dir := filepath.Join(root, d.UUID())
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "device.json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			err = Apply(p, s, WithMPSStateRoot(root))
			want := tc.want + " " + d.String() + " (" + filepath.Join(dir, "device.json") + "): stop it with gpuctk mps stop"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want %q (record %s)", err, want, data)
			}
			if !reflect.DeepEqual(host(t, s), before) {
				t.Error("the host changed")
			}
		})
	}
}
