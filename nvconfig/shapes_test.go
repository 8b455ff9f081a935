package nvconfig

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/deviceplugin"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// TestNVIDIAShapes imports NVIDIA device plugin configs of every shape
// (NVIDIA's own examples in testdata/nvidia, and a table of the rest)
// and runs each on every embedded profile through the device plugin's
// state, comparing the resources and the replicas of each device with
// those NVIDIA's plugin advertises (nvidiaResources, a model of its
// internal/rm device map). A config NVIDIA's plugin refuses on a host
// must be refused by gpuctk's plugin there too, and the other way round.
func TestNVIDIAShapes(t *testing.T) {
	const ts = "version: v1\nflags:\n  migStrategy: %s\nsharing:\n  timeSlicing:\n%s    resources:\n%s"
	shapes := map[string]string{
		"time-slicing none":            fmt.Sprintf(ts, "none", "", "    - name: nvidia.com/gpu\n      replicas: 4\n"),
		"time-slicing renameByDefault": fmt.Sprintf(ts, "none", "    renameByDefault: true\n", "    - name: nvidia.com/gpu\n      replicas: 3\n"),
		"time-slicing failRequests":    fmt.Sprintf(ts, "none", "    failRequestsGreaterThanOne: true\n", "    - name: gpu\n      replicas: 2\n"),
		"time-slicing devices list":    fmt.Sprintf(ts, "none", "", "    - name: nvidia.com/gpu\n      devices: [\"0\"]\n      replicas: 5\n"),
		"time-slicing devices count":   fmt.Sprintf(ts, "none", "", "    - name: nvidia.com/gpu\n      devices: 1\n      replicas: 5\n"),
		"time-slicing rename":          fmt.Sprintf(ts, "none", "", "    - name: nvidia.com/gpu\n      rename: gpu-small\n      replicas: 2\n"),
		"time-slicing single":          fmt.Sprintf(ts, "single", "", "    - name: nvidia.com/gpu\n      replicas: 2\n"),
		"time-slicing mixed": fmt.Sprintf(ts, "mixed", "    renameByDefault: true\n",
			"    - name: nvidia.com/gpu\n      replicas: 2\n    - name: nvidia.com/mig-1g.5gb\n      replicas: 3\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n    - name: nvidia.com/mig-3g.40gb\n      replicas: 2\n"),
		"mps none":   "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
		"mig none":   "version: v1\nflags:\n  migStrategy: none\n",
		"mig single": "version: v1\nflags:\n  migStrategy: single\n",
		"mig mixed":  "version: v1\nflags:\n  migStrategy: mixed\n",
		"configmap": "apiVersion: v1\nkind: ConfigMap\ndata:\n  default: \"\"\n  a: |\n" + indent(fmt.Sprintf(ts, "none", "", "    - name: nvidia.com/gpu\n      replicas: 4\n")) +
			"  b: |\n" + indent("version: v1\nflags:\n  migStrategy: mixed\n"),
	}
	files, _ := filepath.Glob("testdata/nvidia/*.yaml")
	if len(files) < 7 {
		t.Fatalf("testdata/nvidia holds %d configs, want NVIDIA's examples", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		shapes[filepath.Base(f)] = string(data)
	}
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		t.Run(name, func(t *testing.T) {
			outs, err := Convert([]byte(shapes[name]), name)
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			docs := configTexts(t, []byte(shapes[name]))
			for _, o := range outs {
				if o.TOML == nil {
					continue
				}
				cfg, err := config.Parse(o.TOML)
				if err != nil {
					t.Fatalf("key %q: %v\n%s", o.Key, err, o.TOML)
				}
				for _, profile := range inventory.Profiles() {
					host := profileHost(t, profile)
					want, nverr := nvidiaResources(t, docs[o.Key], host)
					got, err := pluginResources(cfg, host)
					switch {
					case nverr != nil && err == nil:
						t.Errorf("key %q on %s: NVIDIA's plugin refuses (%v), gpuctk's advertises %v", o.Key, profile, nverr, got)
					case nverr == nil && err != nil:
						t.Errorf("key %q on %s: NVIDIA's plugin advertises %v, gpuctk's refuses: %v\n%s", o.Key, profile, want, err, o.TOML)
					case nverr == nil && !maps.Equal(got, want):
						t.Errorf("key %q on %s:\ngpuctk  %v\nNVIDIA  %v\n%s", o.Key, profile, got, want, o.TOML)
					}
				}
			}
		})
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

func profileHost(t *testing.T, name string) *inventory.Host {
	p, err := inventory.LoadProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Host()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// configTexts returns the config of each key ("" for a plain config).
func configTexts(t *testing.T, data []byte) map[string][]byte {
	var cm struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" {
		return map[string][]byte{"": data}
	}
	out := map[string][]byte{}
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	return out
}

// pluginResources runs cfg through the device plugin's state on host: each
// resource with the number of kubelet devices of each physical device
// ("GPU-…": 1 whole, N replicas).
func pluginResources(cfg *config.Config, host *inventory.Host) (map[string]string, error) {
	set, err := offer.Resolve(host, cfg)
	if err != nil {
		return nil, err
	}
	st, err := deviceplugin.NewState(cfg, set, nil, "nvidia.com/gpu", nil, true)
	if err != nil {
		return nil, err
	}
	count := map[string]map[string]int{}
	for _, r := range st.Resources {
		count[r.Name] = map[string]int{}
		for _, d := range r.Devices {
			count[r.Name][d.UUID()]++
		}
	}
	return summarize(count), nil
}

// summarize writes each resource's devices as "uuid×n ..." sorted.
func summarize(count map[string]map[string]int) map[string]string {
	out := map[string]string{}
	for r, devs := range count {
		var parts []string
		for _, u := range slices.Sorted(maps.Keys(devs)) {
			parts = append(parts, fmt.Sprintf("%s×%d", u, devs[u]))
		}
		out[r] = strings.Join(parts, " ")
	}
	return out
}

// nvidiaResources is what NVIDIA's plugin advertises for config on host,
// after its internal/rm device map (NewDeviceMap): whole GPUs as
// nvidia.com/gpu (those in MIG mode too under "none"); under single, MIG
// devices as nvidia.com/gpu (every GPU in MIG mode with MIG devices of one
// profile, else an error); under mixed, nvidia.com/mig-<profile>. Each
// shared resource then has every one of its devices replicated
// (DisableResourceNamingInConfig drops devices and rename), named
// <name>.shared with renameByDefault. One difference is the model's: MPS
// does not share a GPU in MIG mode whole (NVIDIA's daemon cannot serve
// it); gpuctk offers it whole.
func nvidiaResources(t *testing.T, data []byte, host *inventory.Host) (map[string]string, error) {
	var c struct {
		Flags struct {
			MigStrategy string `yaml:"migStrategy"`
		} `yaml:"flags"`
		Sharing struct {
			TimeSlicing *replicatedModel `yaml:"timeSlicing"`
			MPS         *replicatedModel `yaml:"mps"`
		} `yaml:"sharing"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	strategy := c.Flags.MigStrategy
	if strategy == "" {
		strategy = "none"
	}
	devs := map[string]map[string]int{} // resource -> uuid -> 1
	add := func(r, uuid string) {
		if devs[r] == nil {
			devs[r] = map[string]int{}
		}
		devs[r][uuid] = 1
	}
	migEnabled := map[string]bool{}
	var profiles []string
	whole := 0
	for _, g := range host.GPUs {
		migEnabled[g.UUID] = g.MIGEnabled
		if g.MIGEnabled && strategy != "none" {
			if strategy == "single" && len(g.MIG) == 0 {
				return nil, fmt.Errorf("device %d has no MIG devices configured", g.Index)
			}
			for _, m := range g.MIG {
				if !slices.Contains(profiles, m.Profile) {
					profiles = append(profiles, m.Profile)
				}
				if strategy == "single" {
					add("nvidia.com/gpu", m.UUID)
				} else {
					add("nvidia.com/mig-"+strings.ReplaceAll(m.Profile, "+", "."), m.UUID)
				}
			}
			continue
		}
		whole++
		add("nvidia.com/gpu", g.UUID)
	}
	if strategy == "single" && len(profiles) > 0 && (whole > 0 || len(profiles) > 1) {
		return nil, fmt.Errorf("single: GPUs in and out of MIG mode, or several profiles")
	}
	shared := c.Sharing.TimeSlicing
	mps := c.Sharing.MPS != nil && len(c.Sharing.MPS.Resources) > 0
	if mps {
		shared = c.Sharing.MPS
	}
	out := map[string]map[string]int{}
	names := map[string]bool{}
	if shared != nil {
		for _, r := range shared.Resources {
			names[resourceName(r.Name)] = true
		}
	}
	for r, d := range devs {
		if !names[r] {
			out[r] = d
		}
	}
	if shared != nil {
		for _, r := range shared.Resources {
			name := resourceName(r.Name)
			to := name
			if shared.RenameByDefault {
				to = name + ".shared"
			}
			for uuid := range devs[name] {
				if mps && migEnabled[uuid] {
					if out[name] == nil {
						out[name] = map[string]int{}
					}
					out[name][uuid] = 1
					continue
				}
				if out[to] == nil {
					out[to] = map[string]int{}
				}
				out[to][uuid] = r.Replicas
			}
		}
	}
	return summarize(out), nil
}

type replicatedModel struct {
	RenameByDefault bool `yaml:"renameByDefault"`
	Resources       []struct {
		Name     string `yaml:"name"`
		Replicas int    `yaml:"replicas"`
	} `yaml:"resources"`
}
