package cdi

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"go.yaml.in/yaml/v3"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// sharingConfigs are the configs the golden specs are made with, by host:
// time-sliced GPUs and MIG devices, MPS GPUs (p100, l40s) and MPS MIG
// devices (dgx-a100, h100). dgx-a100 gives replicas every name; the
// others, the default (index).
var sharingConfigs = map[string]string{
	"dgx-a100": `
[cdi]
replica-names = ["index", "uuid", "gpu:mig"]

[[sharing]]
devices = ["1", "2g.10gb"]
strategy = "time-slicing"
replicas = 3

[[sharing]]
devices = ["mig-0"]
strategy = "mps"
replicas = 2
`,
	"h100": `
[[sharing]]
devices = ["mig-0", "mig-1"]
strategy = "time-slicing"
replicas = 2

[[sharing]]
devices = ["mig-2"]
strategy = "mps"
replicas = 4
active-thread-percentage = 30
pinned-memory-limit = "2GiB"
`,
	"l40s": `
[[sharing]]
devices = ["0"]
strategy = "mps"
replicas = 3

[[sharing]]
devices = ["1"]
strategy = "time-slicing"
replicas = 2
`,
	"p100": `
[mps]
state-root = "/run/mps"

[[sharing]]
devices = ["1"]
strategy = "mps"
replicas = 16
`,
	"dgx-h100-mig": `
[[sharing]]
devices = ["all"]
strategy = "time-slicing"
replicas = 8
`,
}

// sharingConfig parses a host's entry of sharingConfigs and resolves it.
func sharingConfig(t testing.TB, name string, h *inventory.Host) (*config.Config, *offer.Set) {
	t.Helper()
	cfg, err := config.Parse([]byte(sharingConfigs[name]))
	if err != nil {
		t.Fatal(err)
	}
	set, err := offer.Resolve(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, set
}

func generateFor(t testing.TB, name string) (*inventory.Host, []byte, Summary) {
	t.Helper()
	p, err := inventory.LoadProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := p.Host()
	cfg, set := sharingConfig(t, name, h)
	spec, sum, err := ForConfig(cfg).Generate(set, driver.Standard(p.DriverVersion, p.UVMMajor, p.CapsMajor))
	if err != nil {
		t.Fatal(err)
	}
	data, err := Marshal(spec, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	return h, data, sum
}

// TestGolden compares the whole spec of every simulated host with its
// golden file (go test ./cdi -update rewrites them).
func TestGolden(t *testing.T) {
	for _, name := range inventory.Profiles() {
		t.Run(name, func(t *testing.T) {
			_, data, _ := generateFor(t, name)
			golden := filepath.Join("testdata", name+".yaml")
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

// TestInjectEveryName reads each generated spec back with the CDI library
// and injects every device it advertises into an OCI spec.
func TestInjectEveryName(t *testing.T) {
	for _, name := range inventory.Profiles() {
		t.Run(name, func(t *testing.T) {
			h, data, sum := generateFor(t, name)
			dir := t.TempDir()
			if err := WriteSpec(filepath.Join(dir, "nvidia.yaml"), data); err != nil {
				t.Fatal(err)
			}
			cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			if errs := cache.GetErrors(); len(errs) > 0 {
				t.Fatalf("spec errors: %v", errs)
			}
			devices := cache.ListDevices()
			if want := sum.Devices + len(capability.Extra()); len(devices) != want {
				t.Fatalf("cache lists %d devices, summary says %d and %d capability devices", len(devices), sum.Devices, want-sum.Devices)
			}
			for _, d := range devices {
				ocispec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
				if unresolved, err := cache.InjectDevices(ocispec, d); err != nil {
					t.Fatalf("inject %s: %v (unresolved %v)", d, err, unresolved)
				}
				if IsCapability(strings.TrimPrefix(d, "nvidia.com/gpu=")) {
					continue // mounts alone, checked in TestCapabilityDevices
				}
				if len(ocispec.Linux.Devices) < 2 || len(ocispec.Mounts) == 0 || ocispec.Hooks == nil || len(ocispec.Hooks.CreateContainer) < 1 {
					t.Fatalf("inject %s: devices %d, mounts %d, hooks %+v", d, len(ocispec.Linux.Devices), len(ocispec.Mounts), ocispec.Hooks)
				}
			}
			// A whole device is reachable by each of its names; a shared
			// one's replicas by the names replica-names picks, and no other.
			cfg, set := sharingConfig(t, name, h)
			isShared := map[string]bool{}
			for _, s := range set.Shared {
				isShared[s.UUID()] = true
			}
			for _, d := range h.Devices() {
				picked, suffix := d.Names(), ""
				if isShared[d.UUID()] {
					picked, suffix = namesOfStyles(d, cfg.CDI.ReplicaNames), "::0"
				}
				for _, n := range d.Names() {
					got, want := cache.GetDevice("nvidia.com/gpu="+n+suffix) != nil, slices.Contains(picked, n)
					if got != want {
						t.Errorf("%s: device %s%s in the spec: %v, want %v", d, n, suffix, got, want)
					}
				}
			}
		})
	}
}

func TestSummaryAndNames(t *testing.T) {
	_, data, sum := generateFor(t, "dgx-a100")
	// GPU 1 and the four 2g.10gb instances (three on GPU 5, one on GPU 7)
	// are shared 3 ways, mig-0 through MPS 2 ways.
	// GPUs 4-7, in MIG mode, are offered whole too (two names each).
	if want := (Summary{GPUs: 8, MIGDevices: 16, Replicas: 17, Devices: 3*2 + 1*3*2 + 4*2 + 11*3 + 4*3*3 + 2*3 + 1,
		Capabilities: []string{"capability-graphics", "capability-video", "capability-display", "capability-ngx", "capability-optix", "capability-pkcs11", "capability-sandboxutils"}}); !reflect.DeepEqual(sum, want) {
		t.Errorf("summary = %+v", sum)
	}
	s := string(data)
	for _, want := range []string{`name: "1::2"`, `name: "mig-7::0"`, `name: "5:0::1"`, `name: "mig-0::1"`, `name: "0"`, `name: "4"`, `name: "all"`} {
		if !strings.Contains(s, want) {
			t.Errorf("spec has no %q", want)
		}
	}
	for _, absent := range []string{`name: "1"` + "\n", `name: "mig-7"` + "\n"} {
		if strings.Contains(s, absent) {
			t.Errorf("spec has %q: a shared device is offered whole", absent)
		}
	}
}

// TestReplicaNames generates the largest host, every MIG device shared 8
// ways, with each setting of replica-names and compares the spec's device
// names with the expected list.
func TestReplicaNames(t *testing.T) {
	set, files := largestHost(t, 8)
	h := set.Host
	for _, tc := range []struct {
		name   string
		styles []string // nil: the default
		names  func(inventory.Device) []string
		count  int
	}{
		{"default", nil, func(d inventory.Device) []string { return []string{d.Name()} }, 8*2 + 56*8 + 1},
		{"index", []string{"index"}, func(d inventory.Device) []string { return []string{d.Name()} }, 8*2 + 56*8 + 1},
		{"uuid", []string{"uuid"}, func(d inventory.Device) []string { return []string{d.UUID()} }, 8*2 + 56*8 + 1},
		{"all three in any order", []string{"uuid", "gpu:mig", "index", "uuid"}, inventory.Device.Names, 8*2 + 56*8*3 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(sharingConfigs["dgx-h100-mig"]))
			if err != nil {
				t.Fatal(err)
			}
			if tc.styles != nil {
				cfg.CDI.ReplicaNames = tc.styles
			}
			set, err := offer.Resolve(h, cfg)
			if err != nil {
				t.Fatal(err)
			}
			spec, sum, err := New().Generate(set, files)
			if err != nil {
				t.Fatal(err)
			}
			var want, got []string
			for _, d := range h.Devices() {
				// Each GPU, in MIG mode, whole (by its default names)
				// before its MIG devices' replicas.
				if d.MIG.Index == d.GPU.MIG[0].Index {
					want = append(want, strconv.Itoa(d.GPU.Index), d.GPU.UUID)
				}
				for k := range 8 {
					for _, n := range tc.names(d) {
						want = append(want, n+"::"+strconv.Itoa(k))
					}
				}
			}
			want = append(want, "all")
			for _, d := range spec.Devices {
				if !IsCapability(d.Name) {
					got = append(got, d.Name)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("device names:\n got %v\nwant %v", got, want)
			}
			if len(got) != tc.count || sum.Devices != tc.count {
				t.Errorf("%d device names, summary says %d; want %d", len(got), sum.Devices, tc.count)
			}
		})
	}
}

func TestFormatFor(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ format, output, want, warning, err string }{
		// A folder is no spec file: before, the spec was built, then
		// written to a temporary file and the rename failed with "file
		// exists", or "renameat ..tmp-…: empty path" for a trailing
		// slash, after a warning to rename it.
		{"", dir, "", "", dir + " is a folder: name the spec file in it, such as " + filepath.Join(dir, DefaultSpecName)},
		{"", "/var/run/cdi/", "", "", "/var/run/cdi/ is a folder: name the spec file in it, such as /var/run/cdi/nvidia.yaml"},
		{"json", dir + "/", "", "", "is a folder"},
		{"", "", "yaml", "", ""},
		{"", "/var/run/cdi/nvidia.json", "json", "", ""},
		{"", "/var/run/cdi/nvidia.yaml", "yaml", "", ""},
		{"yaml", "/x.json", "yaml", "", ""},
		{"", "/x.txt", "yaml", "/x.txt will not be read by CDI runtimes", ""},
		{"json", "/x.yml", "json", "/x.yml will not be read by CDI runtimes", ""},
		{"toml", "", "", "", "not known"},
	} {
		got, warning, err := FormatFor(tc.format, tc.output)
		if got != tc.want || !strings.Contains(warning, tc.warning) || (tc.warning == "") != (warning == "") ||
			(tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("FormatFor(%q, %q) = %q, %q, %v", tc.format, tc.output, got, warning, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	p, _ := inventory.LoadProfile("l40s")
	h, _ := p.Host()
	set, err := offer.Resolve(h, config.Default())
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := New(WithKind("nvidia.com", "gpu")).Generate(set, driver.Standard(p.DriverVersion, 510, 511))
	if err != nil {
		t.Fatal(err)
	}
	spec.Devices = append(spec.Devices, spec.Devices[0])
	if err := Validate(spec); err == nil || !strings.Contains(err.Error(), `device "0" appears twice`) {
		t.Errorf("duplicate: %v", err)
	}
	if _, _, err := New(WithKind("bad vendor!", "gpu")).Generate(set, driver.Standard(p.DriverVersion, 510, 511)); err == nil {
		t.Error("bad vendor accepted")
	}
	empty := &inventory.Host{DriverVersion: "1"}
	if _, _, err := New().Generate(&offer.Set{Host: empty}, driver.Standard("1", 510, 511)); err == nil || !strings.Contains(err.Error(), "no NVIDIA GPUs") {
		t.Errorf("empty host: %v", err)
	}
}

// TestYAMLRoundTrip parses the fast writer's YAML with the CDI library's
// own parser and compares it with the spec it came from, and with the
// reflective encoder's output read back the same way.
func TestYAMLRoundTrip(t *testing.T) {
	for _, name := range inventory.Profiles() {
		t.Run(name, func(t *testing.T) {
			_, data, _ := generateFor(t, name)
			fast, err := cdiapi.ParseSpec(data)
			if err != nil {
				t.Fatal(err)
			}
			var sb strings.Builder
			enc := yaml.NewEncoder(&sb)
			if err := enc.Encode(fast); err != nil {
				t.Fatal(err)
			}
			slow, err := cdiapi.ParseSpec([]byte(sb.String()))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Error("the fast YAML reads back differently from yaml.v3's")
			}
			if err := Validate(fast); err != nil {
				t.Error(err)
			}
		})
	}
	// Strings YAML would otherwise read as something else stay strings,
	// control characters included.
	spec := &specs.Spec{Version: "0.5.0", Kind: "nvidia.com/gpu", Devices: []specs.Device{
		{Name: "0:1", ContainerEdits: specs.ContainerEdits{Env: []string{"A=yes", "B=\"q\"\n#x", "no", "1e3", "~",
			"C=\x7f\u0085\u0080\u009f\u2028\ufeff\t\\", "D=*alias &anchor {}", "E=é漢"}}},
	}}
	w := yamlWriter{}
	got, err := cdiapi.ParseSpec(w.spec(spec))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Devices, spec.Devices) {
		t.Errorf("read back %+v", got.Devices)
	}
	// Bytes that are not UTF-8 cannot be written as a YAML string.
	spec.Devices[0].ContainerEdits.Env = []string{"A=\xff"}
	if _, err := Marshal(spec, "yaml"); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("invalid UTF-8: err = %v", err)
	}
}

// namesOfStyles lists a device's names of the given styles, in the order
// of Names, as the test expects replicas to be named.
func namesOfStyles(d inventory.Device, styles []string) []string {
	var out []string
	for _, n := range d.Names() {
		switch {
		case n == d.Name() && slices.Contains(styles, config.IndexNames),
			n == d.GPUMIGName() && slices.Contains(styles, config.GPUMIGNames),
			n == d.UUID() && slices.Contains(styles, config.UUIDNames):
			out = append(out, n)
		}
	}
	return out
}

// lineDiff shows where two texts differ: each differing line with its
// number, "-" for want and "+" for got, at most 20 of them; "" when equal.
func lineDiff(want, got string) string {
	if want == got {
		return ""
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n- %s\n+ %s\n", i+1, wl, gl)
			shown++
		}
	}
	if len(w) != len(g) {
		fmt.Fprintf(&b, "(%d lines, want %d)\n", len(g), len(w))
	}
	return b.String()
}

// TestMarshalRefusesUnwrittenFields checks that a spec with fields the YAML
// writer does not write is refused, not written without them.
func TestMarshalRefusesUnwrittenFields(t *testing.T) {
	spec := &specs.Spec{Version: "0.5.0", Kind: "nvidia.com/gpu", Annotations: map[string]string{"a": "b"},
		Devices: []specs.Device{{Name: "0"}}}
	if _, err := Marshal(spec, "yaml"); err == nil || !strings.Contains(err.Error(), "write it as JSON") {
		t.Errorf("err = %v", err)
	}
	if _, err := Marshal(spec, "json"); err != nil {
		t.Errorf("json: %v", err)
	}
}

func TestSummaryCounts(t *testing.T) {
	for _, tc := range []struct {
		s    Summary
		want string
	}{
		{Summary{GPUs: 1, MIGDevices: 0, Replicas: 1, Devices: 2}, "1 GPU, 0 MIG devices, 1 replica, 2 device names"},
		{Summary{GPUs: 8, MIGDevices: 16, Replicas: 0, Devices: 57}, "8 GPUs, 16 MIG devices, 0 replicas, 57 device names"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestListConflicts writes one host's spec three times, twice in one
// folder and once in another: the three files are one conflict naming
// them all and every shared name; two files are "both".
func TestListConflicts(t *testing.T) {
	_, data, sum := generateFor(t, "l40s")
	a, b := t.TempDir(), t.TempDir()
	paths := []string{filepath.Join(a, "dup.yaml"), filepath.Join(a, "nvidia.yaml"), filepath.Join(b, "other.yaml")}
	for _, p := range paths {
		if err := WriteSpec(p, data); err != nil {
			t.Fatal(err)
		}
	}
	_, conflicts, errs, err := List([]string{a, b})
	if err != nil || len(errs) != 0 {
		t.Fatalf("List: %v, %v", err, errs)
	}
	if len(conflicts) != 1 || !slices.Equal(conflicts[0].Files, paths) {
		t.Fatalf("conflicts %v, want one of %v", conflicts, paths)
	}
	c := conflicts[0]
	// The summary counts no capability device; a conflict names them.
	if want := sum.Devices + len(capability.Extra()); len(c.Names) != want {
		t.Errorf("%s: %d names, want %d", c, len(c.Names), want)
	}
	if want := paths[0] + ", " + paths[1] + ", " + paths[2] + " all define 17 device names (nvidia.com/gpu=0::0, nvidia.com/gpu=0::1, nvidia.com/gpu=0::2 and 14 more)"; c.String() != want {
		t.Errorf("String = %q\nwant     %q", c, want)
	}
	if _, conflicts, _, _ := List([]string{b, a + "/../" + filepath.Base(a)}); len(conflicts) != 1 || !strings.HasPrefix(conflicts[0].String(), paths[2]+", ") {
		t.Errorf("in another order: %v", conflicts)
	}
	os.Remove(paths[0])
	if _, conflicts, _, _ := List([]string{a, b}); len(conflicts) != 1 || !strings.HasPrefix(conflicts[0].String(), paths[1]+" and "+paths[2]+" both define 17 device names") {
		t.Errorf("two files: %v", conflicts)
	}
	// One spec alone has none.
	if _, conflicts, _, _ := List([]string{b}); len(conflicts) != 0 {
		t.Errorf("one spec: conflicts %v", conflicts)
	}
}

// TestHostDriverRoot checks that a spec written by gpuctk seeing the host's
// root at /driver-root names the host's paths in its mounts.
func TestHostDriverRoot(t *testing.T) {
	p, _ := inventory.LoadProfile("l40s")
	h, _ := p.Host()
	cfg := config.Default()
	set, err := offer.Resolve(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := driver.Standard(p.DriverVersion, p.UVMMajor, p.CapsMajor)
	for _, m := range f.Mounts {
		m.HostPath = filepath.Join("/driver-root", m.HostPath)
	}
	cfg.CDI.DriverRoot, cfg.CDI.HostDriverRoot = "/driver-root", "/"
	data, _, _, err := Build(set, f, cfg, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "/driver-root") || !strings.Contains(string(data), `hostPath: "/usr/bin/nvidia-smi"`) {
		t.Errorf("spec mounts still name /driver-root, or not the host's paths:\n%s", data)
	}
}

// TestCapabilityDevices: a standard install's spec has one device per
// capability beyond compute and utility (none for "all"), each with
// mounts only; the summary and `cdi list`'s counts leave them out.
func TestCapabilityDevices(t *testing.T) {
	_, data, sum := generateFor(t, "l40s")
	spec := &specs.Spec{}
	if err := yaml.Unmarshal(data, spec); err != nil {
		t.Fatal(err)
	}
	var names []string
	offered := 0
	byName := map[string]specs.Device{}
	for _, d := range spec.Devices {
		byName[d.Name] = d
		if !IsCapability(d.Name) {
			offered++
			continue
		}
		names = append(names, d.Name)
		e := d.ContainerEdits
		if len(e.Mounts) == 0 || len(e.DeviceNodes) > 0 || len(e.Hooks) > 0 || len(e.Env) > 0 {
			t.Errorf("%s: edits %+v, want mounts only", d.Name, e)
		}
	}
	want := "capability-graphics capability-video capability-display capability-ngx capability-optix capability-pkcs11 capability-sandboxutils"
	if strings.Join(names, " ") != want {
		t.Errorf("capability devices %q, want %q", names, want)
	}
	if sum.Devices != offered {
		t.Errorf("summary counts %d device names, want %d (no capability device)", sum.Devices, offered)
	}
	dir := t.TempDir()
	if err := WriteSpec(filepath.Join(dir, "nvidia.yaml"), data); err != nil {
		t.Fatal(err)
	}
	listed, _, _, err := List([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	caps := 0
	for _, l := range listed {
		if l.Capability != IsCapability(strings.TrimPrefix(l.Name, spec.Kind+"=")) {
			t.Errorf("listed %+v: capability %v", l, l.Capability)
		}
		if l.Capability {
			caps++
		}
	}
	if caps != len(names) || len(listed)-caps != sum.Devices {
		t.Errorf("cdi list: %d capability devices of %d, want %d of %d", caps, len(listed), len(names), sum.Devices+len(names))
	}
}
