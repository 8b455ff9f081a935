package mig

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpuctk/gpuctk/inventory"
)

// TestEmbeddedIsNVIDIAs checks that the built-in layouts are, byte for
// byte, the config-default.yaml of NVIDIA's GPU operator: the config.yaml
// of its default-mig-parted-config ConfigMap (testdata/nvidia, see its
// README), which the operator mounts as config-default.yaml.
func TestEmbeddedIsNVIDIAs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "nvidia", "0400_configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	embeddedData, err := embedded.ReadFile("configs/config-default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["config.yaml"] == "" || cm.Data["config.yaml"] != string(embeddedData) {
		t.Error("configs/config-default.yaml is not the config.yaml of testdata/nvidia/0400_configmap.yaml")
	}
}

// TestNVIDIAConfig applies every layout of NVIDIA's config-default.yaml
// (the built-in layouts) to every embedded simulated host. Each either
// applies, after which the host has it and a second plan is empty, or is
// refused in one line naming the profile a GPU it selects lacks (or the
// GPU, for one without MIG), as lacking works out from the models. The outcomes are testdata/config-default/HOST.txt, one line a
// layout; go test ./mig -update rewrites them as models are added.
func TestNVIDIAConfig(t *testing.T) {
	cfg := embeddedConfig(t)
	if len(cfg.Names()) < 50 {
		t.Fatalf("the built-in config has %d layouts; NVIDIA's has more than 50", len(cfg.Names()))
	}
	for _, profile := range inventory.Profiles() {
		t.Run(profile, func(t *testing.T) {
			var out bytes.Buffer
			for _, name := range cfg.Names() {
				fmt.Fprintf(&out, "%s: %s\n", name, outcome(t, profile, cfg, name))
			}
			golden(t, filepath.Join("config-default", profile+".txt"), out.Bytes())
		})
	}
}

// outcome applies layout name to a fresh copy of the simulated host and
// says what came of it: each GPU's layout, or the refusal.
func outcome(t *testing.T, profile string, cfg *Config, name string) string {
	t.Helper()
	p, err := inventory.LoadProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	s := &Simulator{profile: p, empty: map[string]map[int]bool{}}
	entries, _ := cfg.Layout(name)
	lacks := lacking(host(t, s), entries)
	plan, err := Compute(host(t, s), cfg, name)
	if err != nil {
		msg := err.Error()
		if lacks == "" || strings.Contains(msg, "\n") || !strings.Contains(msg, lacks) {
			t.Errorf("%s: refused, not in one line for %q: %q", name, lacks, msg)
		}
		return "refused: " + msg
	}
	if lacks != "" {
		t.Errorf("%s: applied, though %s", name, lacks)
	}
	if err := Apply(plan, s); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	h := host(t, s)
	if again, err := Compute(h, cfg, name); err != nil || !again.Empty() {
		t.Errorf("%s: second plan: %v %v", name, err, again)
	}
	type run struct {
		first, last int
		what        string
	}
	var runs []run
	for i, g := range h.GPUs {
		what := "left as is"
		for _, e := range entries {
			if e.matches(&h.GPUs[i]) {
				what = describe(g.MIGEnabled, current(&g))
			}
		}
		if n := len(runs); n > 0 && runs[n-1].what == what {
			runs[n-1].last = g.Index
			continue
		}
		runs = append(runs, run{g.Index, g.Index, what})
	}
	var parts []string
	for _, r := range runs {
		if r.first == r.last {
			parts = append(parts, fmt.Sprintf("GPU %d: %s", r.first, r.what))
		} else {
			parts = append(parts, fmt.Sprintf("GPUs %d-%d: %s", r.first, r.last, r.what))
		}
	}
	return strings.Join(parts, "; ")
}

// lacking says what the first GPU the layout selects for MIG devices lacks
// for them, as the refusal names it: "GPU 2 (NAME)" when gpuctk has no MIG
// model for it, "profile 1g.5gb+me" when its model lacks that profile; ""
// when every GPU selected can have the layout.
func lacking(h *inventory.Host, entries []Entry) string {
	for i := range h.GPUs {
		g := &h.GPUs[i]
		for _, e := range entries {
			if !e.matches(g) || !e.MIGEnabled {
				continue
			}
			m, ok := ModelOf(g)
			if !ok {
				return fmt.Sprintf("GPU %d (%s)", g.Index, g.Name)
			}
			for _, p := range slices.Sorted(maps.Keys(e.MIGDevices)) {
				if _, ok := m.Profile(p); !ok {
					return "profile " + p + " "
				}
			}
		}
	}
	return ""
}
