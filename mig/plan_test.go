package mig

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// simulator returns a Simulator over a copy of an embedded profile.
func simulator(t *testing.T, profile string) *Simulator {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "inventory", "profiles", profile+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), profile+".toml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSimulator(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func embeddedConfig(t *testing.T) *Config {
	t.Helper()
	c, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func host(t *testing.T, s *Simulator) *inventory.Host {
	t.Helper()
	h, err := s.Host()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./mig -update writes it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (go test ./mig -update rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestApplyTwice applies each embedded layout to simulated hosts: the plan
// is the golden one, the host then has the layout (assert finds no
// difference), and a second apply changes nothing.
func TestApplyTwice(t *testing.T) {
	cfg := embeddedConfig(t)
	for _, tc := range []struct{ profile, layout string }{
		{"dgx-a100", "all-1g.5gb"},
		{"dgx-a100", "all-balanced"},
		{"dgx-a100", "all-disabled"},
		{"dgx-a100", "all-enabled"},
		{"dgx-a100", "all-1g.10gb"},
		{"dgx-a100", "all-2g.10gb"},
		{"dgx-a100", "all-3g.20gb"},
		{"h100", "all-balanced"},
		{"h100", "all-3g.40gb"},
		{"dgx-h100-mig", "all-1g.10gb"},
		{"l40s", "all-disabled"},
	} {
		t.Run(tc.profile+"/"+tc.layout, func(t *testing.T) {
			s := simulator(t, tc.profile)
			p, err := Compute(host(t, s), cfg, tc.layout)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "plan-"+tc.profile+"-"+tc.layout+".txt", []byte(strings.Join(p.Lines(), "\n")+"\n"))
			if err := Apply(p, s); err != nil {
				t.Fatal(err)
			}
			h := host(t, s)
			if err := h.Validate(); err != nil {
				t.Fatal(err)
			}
			again, err := Compute(h, cfg, tc.layout)
			if err != nil {
				t.Fatal(err)
			}
			if !again.Empty() || len(again.Differences()) != 0 {
				t.Errorf("second plan is not empty:\n%s", strings.Join(again.Lines(), "\n"))
			}
		})
	}
}

// TestSimulatedProfileFile applies a layout to a profile file and reads it
// back as `cdi generate --simulate FILE` would.
func TestSimulatedProfileFile(t *testing.T) {
	s := simulator(t, "dgx-a100")
	p, err := Compute(host(t, s), embeddedConfig(t), "all-balanced")
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(p, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	read, err := inventory.LoadProfile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	g := read.GPUs[0]
	want := []struct {
		gi      int
		profile string
		mem     uint64
		sms     int
		engines inventory.Engines // as NVML reports them: labels show them
	}{
		{2, "3g.20gb", 19968, 42, inventory.Engines{Copy: 3, Decoder: 2}},
		{3, "2g.10gb", 9856, 28, inventory.Engines{Copy: 2, Decoder: 1}},
		{9, "1g.5gb", 4864, 14, inventory.Engines{Copy: 1}},
		{10, "1g.5gb", 4864, 14, inventory.Engines{Copy: 1}},
	}
	if !g.MIGEnabled || len(g.MIG) != len(want) {
		t.Fatalf("GPU 0: %+v", g)
	}
	for i, w := range want {
		d := g.MIG[i]
		if d.Index != i || d.GI != w.gi || d.CI != 0 || d.Profile != w.profile || d.MemoryMiB != w.mem || d.SMCount != w.sms || d.Engines != w.engines || !strings.HasPrefix(d.UUID, "MIG-") {
			t.Errorf("GPU 0 MIG device %d: %+v, want %+v", i, d, w)
		}
	}
	data, _ := os.ReadFile(s.path)
	if !strings.HasPrefix(string(data), "# Simulated host \"dgx-a100\"") {
		t.Errorf("the profile's leading comment was not kept:\n%.200s", data)
	}
}

func TestPlace(t *testing.T) {
	a100, _ := ModelOf(&inventory.GPU{Name: "NVIDIA A100-SXM4-40GB"})
	a30, _ := ModelOf(&inventory.GPU{Name: "NVIDIA A30"})
	h200, _ := ModelOf(&inventory.GPU{PCIDeviceID: 0x233510DE})
	// A model whose 2-slice profile may start only at 1, to force a
	// collision that the slice counts alone do not show.
	odd := Model{Name: "odd", ComputeSlices: 7, MemorySlices: 8, Profiles: []Profile{
		{Name: "1g", ComputeSlices: 1, MemorySlices: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
		{Name: "2g", ComputeSlices: 2, MemorySlices: 2, Starts: []int{1}},
	}}
	for _, tc := range []struct {
		name  string
		model *Model
		want  map[string]int
		at    string // GI:start of each instance
		err   string
	}{
		{"seven 1g", a100, map[string]int{"1g.5gb": 7}, "7:0 8:1 9:2 10:3 11:4 12:5 13:6", ""},
		{"3g and two 2g need the upper half", a100, map[string]int{"3g.20gb": 1, "2g.10gb": 2}, "2:4 3:0 4:2", ""},
		{"balanced", a100, map[string]int{"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}, "2:4 3:0 9:2 10:3", ""},
		{"4g and 3g", a100, map[string]int{"4g.20gb": 1, "3g.20gb": 1}, "1:0 2:4", ""},
		{"four 1g.10gb", a100, map[string]int{"1g.10gb": 4}, "3:0 4:2 5:4 6:6", ""},
		{"unknown profile", a100, map[string]int{"1g.10gb": 1, "1g.20gb": 1}, "", "profile 1g.20gb is not one of the A100-40GB's: 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"},
		{"compute slices", a100, map[string]int{"1g.5gb": 5, "2g.10gb": 2}, "", "MIG enabled: 5 x 1g.5gb, 2 x 2g.10gb needs 9 compute slices; the A100-40GB has 7"},
		{"huge count", a100, map[string]int{"1g.5gb": 1 << 62, "2g.10gb": 1 << 62}, "", "4611686018427387904 x 1g.5gb needs more than the 7 compute slices the A100-40GB has"},
		{"memory slices", a100, map[string]int{"3g.20gb": 2, "1g.5gb": 1}, "", "MIG enabled: 1 x 1g.5gb, 2 x 3g.20gb needs 9 memory slices; the A100-40GB has 8"},
		{"one +me instance", a100, map[string]int{"1g.5gb+me": 2}, "", "2 x 1g.5gb+me: the A100-40GB holds at most 1"},
		{"A30 quarters", a30, map[string]int{"1g.6gb": 4}, "3:0 4:1 5:2 6:3", ""},
		{"A30 halves", a30, map[string]int{"2g.12gb": 1, "2g.12gb+me": 1}, "1:0 2:2", ""},
		{"A30 whole", a30, map[string]int{"4g.24gb": 1}, "0:0", ""},
		{"H200 balanced", h200, map[string]int{"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 1, "1g.18gb+me": 1}, "2:4 3:0 9:2 10:3", ""},
		{"collision", &odd, map[string]int{"2g": 2}, "", "MIG enabled: 2 x 2g does not fit: the profiles' allowed placements collide (2g spans 2 memory slices from 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.model, tc.want)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var at []string
			for _, i := range got {
				at = append(at, fmt.Sprintf("%d:%d", i.GI, i.Start))
			}
			if strings.Join(at, " ") != tc.at {
				t.Errorf("placements %s, want %s", strings.Join(at, " "), tc.at)
			}
		})
	}
}

// TestSelectsNone checks that a layout whose entries select none of the
// GPUs (NVIDIA's all-1g.35gb is for the H200 and GB300) plans nothing and
// says so, rather than that the GPUs have it.
func TestSelectsNone(t *testing.T) {
	p, err := Compute(host(t, simulator(t, "dgx-a100")), embeddedConfig(t), "all-1g.35gb")
	if err != nil {
		t.Fatal(err)
	}
	want := `MIG config "all-1g.35gb" selects none of the GPUs (its entries' devices or device-filter name others): nothing to change`
	if !p.Empty() || p.Selected != 0 || strings.Join(p.Lines(), "\n") != want {
		t.Errorf("plan %+v: %q, want %q", p, p.Lines(), want)
	}
	p, err = Compute(host(t, simulator(t, "h100")), embeddedConfig(t), "all-1g.10gb")
	if err != nil || p.Selected != 1 {
		t.Fatalf("all-1g.10gb on h100: %v, %d GPUs selected, want 1", err, p.Selected)
	}
}

// TestRefusals checks that layouts a GPU cannot have are refused, naming
// the GPU and the profile, before anything changes.
func TestRefusals(t *testing.T) {
	cfg := embeddedConfig(t)
	custom, err := ParseConfig("c.yaml", []byte(`version: v1
mig-configs:
  too-many:
    - devices: [4]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2, "2g.10gb": 1}
  more-than-it-holds:
    - devices: [0, 1]
      mig-enabled: false
    - devices: [2, 3]
      device-filter: ["0x20B010DE"]
      mig-enabled: true
      mig-devices: {"1g.10gb": 5}
  missing-gpu:
    - devices: [8]
      mig-enabled: false
  twice:
    - devices: all
      mig-enabled: false
    - devices: [1]
      mig-enabled: false
  id-and-name:
    - devices: all
      device-filter: "0x20b010de"
      mig-enabled: false
    - devices: all
      device-filter: ["H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]
      mig-enabled: false
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		profile, layout string
		cfg             *Config
		want            string
	}{
		{"h100", "all-1g.5gb", cfg, `MIG config embedded config, config "all-1g.5gb" entry 1: GPU 0 (NVIDIA H100 80GB HBM3): profile 1g.5gb is not one of the H100-80GB's: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb`},
		{"l40s", "all-enabled", cfg, `MIG config embedded config, config "all-enabled" entry 1: GPU 0 (NVIDIA L40S): gpuctk has no MIG model data for the NVIDIA L40S (PCI device id 0x26B910DE): it has data for A100-40GB, A100-80GB, A30-24GB`},
		{"dgx-a100", "too-many", custom, `MIG config c.yaml, config "too-many" entry 1: GPU 4 (NVIDIA A100-SXM4-40GB): MIG enabled: 1 x 2g.10gb, 2 x 3g.20gb needs 8 compute slices; the A100-40GB has 7`},
		{"dgx-a100", "more-than-it-holds", custom, `MIG config c.yaml, config "more-than-it-holds" entry 2: GPU 2 (NVIDIA A100-SXM4-40GB): MIG enabled: 5 x 1g.10gb needs 10 memory slices; the A100-40GB has 8`},
		{"dgx-a100", "missing-gpu", custom, `MIG config c.yaml, config "missing-gpu" entry 1: GPU 8 does not exist on this host, which has 8 GPUs`},
		{"dgx-a100", "id-and-name", custom, `config "id-and-name": GPU 0 (NVIDIA A100-SXM4-40GB) is selected by entries 1 and 2:`},
		{"dgx-a100", "twice", custom, `MIG config c.yaml, config "twice": GPU 1 (NVIDIA A100-SXM4-40GB) is selected by entries 1 and 2: make the entries' devices or device-filter disjoint`},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			s := simulator(t, tc.profile)
			before, _ := os.ReadFile(s.path)
			_, err := Compute(host(t, s), tc.cfg, tc.layout)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if after, _ := os.ReadFile(s.path); string(after) != string(before) {
				t.Error("the profile changed")
			}
		})
	}
}

// busy is a Device whose GPUs run processes.
type busy struct{ *Simulator }

func (busy) Busy(string) (string, error) { return "2 compute processes (pids 100, 101)", nil }

// faulty is a Device that fails its nth change.
type faulty struct {
	*Simulator
	n int
}

func (f *faulty) fail() error {
	f.n--
	if f.n == 0 {
		return errors.New("injected failure")
	}
	return nil
}

func (f *faulty) SetMIGMode(g string, on bool) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Simulator.SetMIGMode(g, on)
}

func (f *faulty) DestroyGPUInstance(g string, gi int) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Simulator.DestroyGPUInstance(g, gi)
}

func (f *faulty) CreateGPUInstance(g string, p *Profile, start int) (int, error) {
	if err := f.fail(); err != nil {
		return 0, err
	}
	return f.Simulator.CreateGPUInstance(g, p, start)
}

func (f *faulty) CreateComputeInstance(g string, gi int, p *Profile) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Simulator.CreateComputeInstance(g, gi, p)
}

// TestConverges fails an apply at each of its steps in turn, then plans
// again from the state left and applies: the host ends as after an apply
// that never failed.
func TestConverges(t *testing.T) {
	cfg := embeddedConfig(t)
	clean := simulator(t, "dgx-a100")
	p, err := Compute(host(t, clean), cfg, "all-balanced")
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(p, clean); err != nil {
		t.Fatal(err)
	}
	want := host(t, clean)
	for n := 1; ; n++ {
		s := simulator(t, "dgx-a100")
		p, err := Compute(host(t, s), cfg, "all-balanced")
		if err != nil {
			t.Fatal(err)
		}
		err = Apply(p, &faulty{s, n})
		if err == nil {
			if n < 10 {
				t.Fatalf("only %d steps", n)
			}
			break
		}
		if !strings.Contains(err.Error(), "injected failure: run apply again to finish") {
			t.Fatalf("step %d: %v", n, err)
		}
		p, err = Compute(host(t, s), cfg, "all-balanced")
		if err != nil {
			t.Fatalf("step %d: plan again: %v", n, err)
		}
		if err := Apply(p, s); err != nil {
			t.Fatalf("step %d: apply again: %v", n, err)
		}
		if got := host(t, s); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: host after the second apply differs from a clean apply", n)
		}
	}
}

// TestRefuseBusy checks that a GPU with processes or an MPS daemon is not
// changed, nor any other GPU.
func TestRefuseBusy(t *testing.T) {
	cfg := embeddedConfig(t)
	for _, tc := range []struct {
		name string
		dev  func(*Simulator) Device
		opts func(t *testing.T, h *inventory.Host) []ApplyOption
		want string
	}{
		{"processes", func(s *Simulator) Device { return busy{s} }, nil,
			"GPU 0 (GPU-13fe3248-4da8-65f8-e972-3f15eef51793): 2 compute processes (pids 100, 101): stop them before changing its MIG layout; nothing was changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := simulator(t, "dgx-a100")
			before := host(t, s)
			p, err := Compute(before, cfg, "all-1g.5gb")
			if err != nil {
				t.Fatal(err)
			}
			var opts []ApplyOption
			if tc.opts != nil {
				opts = tc.opts(t, before)
			}
			err = Apply(p, tc.dev(s), opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if !reflect.DeepEqual(host(t, s), before) {
				t.Error("the host changed")
			}
		})
	}
}

// TestExport checks that an exported layout, applied to the host it came
// from, changes nothing.
func TestExport(t *testing.T) {
	for _, profile := range inventory.Profiles() {
		t.Run(profile, func(t *testing.T) {
			h := host(t, simulator(t, profile))
			data, err := Export(h, "current")
			if err != nil {
				t.Fatal(err)
			}
			if profile == "dgx-a100" {
				golden(t, "export-dgx-a100.yaml", data)
			}
			c, err := ParseConfig("export", data)
			if err != nil {
				t.Fatalf("%v\n%s", err, data)
			}
			p, err := Compute(h, c, "current")
			if err != nil {
				t.Fatal(err)
			}
			if !p.Empty() {
				t.Errorf("plan is not empty:\n%s", strings.Join(p.Lines(), "\n"))
			}
		})
	}
}

// TestExportComputeInstanceProfiles: a host whose GPU instance holds
// compute instances smaller than itself (three 1c.3g.20gb, as mig-parted
// or nvidia-smi make them) has no layout gpuctk can apply: export says so
// instead of writing a config that apply and assert then refuse.
func TestExportComputeInstanceProfiles(t *testing.T) {
	s := simulator(t, "dgx-a100")
	h := host(t, s)
	g := &h.GPUs[6]
	g.MIG = nil
	for ci := range 3 {
		g.MIG = append(g.MIG, inventory.MIGDevice{Index: ci, GI: 1, CI: ci, UUID: fmt.Sprintf("MIG-%d", ci), Profile: "1c.3g.20gb", MemoryMiB: 19968, SMCount: 14})
	}
	data, err := Export(h, "current")
	if err == nil {
		c, perr := ParseConfig("export", data)
		if perr != nil {
			t.Fatalf("export wrote a config that does not parse: %v\n%s", perr, data)
		}
		_, cerr := Compute(h, c, "current")
		t.Fatalf("export wrote a config; applying it to the same host: %v\n%s", cerr, data)
	}
	if want := "GPU 6 (NVIDIA A100-SXM4-40GB): MIG device 6:0 is a 1c.3g.20gb, which gpuctk cannot make"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestExportUnknownModel: a GPU gpuctk has no model data for (its
// profiles come from NVML) exports the profiles its driver made, and
// still refuses a compute instance smaller than its GPU instance.
func TestExportUnknownModel(t *testing.T) {
	h := &inventory.Host{GPUs: []inventory.GPU{{Index: 0, UUID: "GPU-x", Name: "NVIDIA H300 Future", PCIDeviceID: 0x2FFF10DE, MIGEnabled: true,
		MIG: []inventory.MIGDevice{{Index: 0, GI: 7, UUID: "MIG-a", Profile: "1g.18gb+me"}, {Index: 1, GI: 8, UUID: "MIG-b", Profile: "1g.18gb"}}}}}
	data, err := Export(h, "current")
	if err != nil || !strings.Contains(string(data), "        \"1g.18gb\": 1\n        \"1g.18gb+me\": 1\n") {
		t.Errorf("export: %v\n%s", err, data)
	}
	h.GPUs[0].MIG[1].Profile = "1c.2g.35gb"
	if _, err := Export(h, "current"); err == nil || !strings.Contains(err.Error(), "MIG device 0:1 is a 1c.2g.35gb, which gpuctk cannot make") {
		t.Errorf("export of a 1c.2g.35gb: %v", err)
	}
}

// TestMissingGPUCount checks that the refusal of a GPU index the host
// lacks counts the host's GPUs in good English: "1 GPU", not "1 GPUs".
func TestMissingGPUCount(t *testing.T) {
	cfg, err := ParseConfig("c.yaml", []byte("version: v1\nmig-configs:\n  missing-gpu:\n    - devices: [8]\n      mig-enabled: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compute(host(t, simulator(t, "h100")), cfg, "missing-gpu")
	want := `MIG config c.yaml, config "missing-gpu" entry 1: GPU 8 does not exist on this host, which has 1 GPU`
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
