package nvconfig

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestConvertGolden converts each realistic config in testdata/ and
// compares the whole output with its golden .toml file.
func TestConvertGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.y*ml")
	if err != nil {
		t.Fatal(err)
	}
	json, _ := filepath.Glob("testdata/*.json")
	inputs = append(inputs, json...)
	if len(inputs) < 6 {
		t.Fatalf("found %d inputs in testdata/, want at least 6", len(inputs))
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			outs, err := Convert(data, filepath.Base(in))
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			got := bytes.NewBuffer(Format(outs))
			for _, o := range outs {
				// Each output is a config gpuctk reads, and its
				// selectors fit a host with full and MIG GPUs.
				cfg, err := config.Parse(o.TOML)
				if err != nil {
					t.Errorf("output for key %q: %v", o.Key, err)
					continue
				}
				if bytes.Contains(o.TOML, []byte(`"GPU-`)) || bytes.Contains(o.TOML, []byte(`"MIG-`)) {
					continue // names UUIDs of another host
				}
				if _, err := offer.Resolve(fakehost.Host(t, "dgx-a100"), cfg); err != nil {
					t.Errorf("output for key %q on dgx-a100: %v", o.Key, err)
				}
			}
			golden := strings.TrimSuffix(in, filepath.Ext(in)) + ".toml"
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./nvconfig -update writes it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("output differs from %s (go test ./nvconfig -update rewrites it)\n--- got\n%s\n--- want\n%s", golden, got.Bytes(), want)
			}
		})
	}
}

// TestConvertErrors feeds configs gpuctk cannot express: each must fail
// with one line naming the field.
func TestConvertErrors(t *testing.T) {
	const head = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "empty: want an NVIDIA device plugin config"},
		{"not yaml", "version: [v1", "did not find expected"},
		{"scalar", "v1\n", "line 1: want a mapping with version: v1"},
		{"no version", "flags:\n  migStrategy: none\n", "version: missing: want v1"},
		{"version v2", "version: v2\n", `line 1: version: "v2" is not supported: want v1`},
		{"unknown top field", "version: v1\nsharingg: {}\n", "line 2: sharingg: unknown field"},
		{"unknown nested field", "version: v1\nflags:\n  plugin:\n    passDeviceSpec: true\n", "line 4: flags.plugin.passDeviceSpec: unknown field"},
		{"unknown field in resource", head + "    - name: nvidia.com/gpu\n      replicas: 2\n    - name: nvidia.com/gpu\n      replica: 2\n", "line 8: sharing.timeSlicing.resources[1].replica: unknown field"},
		{"wrong type", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: gpu\n      replicas: ten\n", "line 6: sharing.mps.resources[0].replicas: cannot unmarshal a string `ten` into int"},
		{"bad mig strategy", "version: v1\nflags:\n  migStrategy: both\n", `flags.migStrategy: "both" is not a MIG strategy`},
		{"one resource twice", head + "    - name: nvidia.com/gpu\n      replicas: 2\n    - name: gpu\n      devices: [\"1\"]\n      replicas: 4\n", "line 7: sharing.timeSlicing.resources[1].name: nvidia.com/gpu is listed twice"},
		{"bad device", head + "    - name: gpu\n      devices: [\"0\", \"gpu1\"]\n      replicas: 4\n", `line 6: sharing.timeSlicing.resources[0].devices[1]: "gpu1" is not a GPU index`},
		{"devices word", head + "    - name: gpu\n      devices: some\n      replicas: 4\n", `sharing.timeSlicing.resources[0].devices: "some": want all or a list`},
		{"mig under none", head + "    - name: nvidia.com/mig-1g.5gb\n      replicas: 2\n", "line 5: sharing.timeSlicing.resources[0].name: nvidia.com/mig-1g.5gb is advertised only under migStrategy mixed, and flags.migStrategy is none"},
		{"unknown resource", head + "    - name: example.com/fpga\n      replicas: 2\n", "sharing.timeSlicing.resources[0].name: nvidia.com/example.com/fpga is not a resource NVIDIA's plugin advertises"},
		{"one replica", head + "    - name: gpu\n      replicas: 1\n", "line 6: sharing.timeSlicing.resources[0].replicas: 1 cannot be expressed"},
		{"no replicas", head + "    - name: gpu\n", "sharing.timeSlicing.resources[0].replicas: missing"},
		{"bad rename", head + "    - name: gpu\n      rename: Small_GPU\n      replicas: 2\n", `sharing.timeSlicing.resources[0].rename: "Small_GPU" is not a valid resource name`},
		{"both strategies", "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n", "line 3: sharing.timeSlicing: NVIDIA's plugin ignores time-slicing"},
		{"volume mounts", "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, volume-mounts]\n", `line 4: flags.plugin.deviceListStrategy[1]: "volume-mounts" cannot be expressed`},
		{"gds", "version: v1\nflags:\n  gdsEnabled: true\n", "flags.gdsEnabled: gpuctk does not inject GPUDirect Storage"},
		{"resource patterns", "version: v1\nresources:\n  gpus:\n  - pattern: '*A100*'\n    name: a100\n", "line 3: resources: custom resource names by pattern cannot be expressed"},
		{"two documents", "version: v1\n---\nversion: v1\n", "line 2: a second YAML document"},
		{"configmap bad value", "kind: ConfigMap\napiVersion: v1\ndata:\n  good: 'version: v1'\n  bad: |\n    version: v1\n    sharing:\n      mps:\n        resources:\n        - name: gpu\n          devices: some\n          replicas: 2\n",
			`data.bad.sharing.mps.resources[0].devices: "some": want all`},
		{"configmap of blank keys", "kind: ConfigMap\napiVersion: v1\ndata:\n  default: ''\n  other: '  '\n", "data: every key is empty"},
		{"configmap unknown field", "kind: ConfigMap\napiVersion: v1\ndatta: {}\n", "line 3: datta: unknown field"},
		{"configmap empty", "kind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\n", "data: the ConfigMap holds no configs"},
		{"configmap bad key", "kind: ConfigMap\napiVersion: v1\ndata:\n  ../x: 'version: v1'\n", `data: key "../x" is not a valid ConfigMap key`},
		{"configmap binary", "kind: ConfigMap\napiVersion: v1\nbinaryData:\n  x: AAAA\n", "binaryData: configs must be text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outs, err := Convert([]byte(tc.in), "test")
			if err == nil {
				t.Fatalf("Convert succeeded, want an error containing %q; output:\n%s", tc.want, outs[0].TOML)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error:\n  %s\nwant one line containing\n  %s", msg, tc.want)
			}
		})
	}
}

func TestReadTooLarge(t *testing.T) {
	big := strings.NewReader("version: v1\n" + strings.Repeat("#", MaxSize))
	if _, err := Read(big, "big"); err == nil || !strings.Contains(err.Error(), "larger than 1024 KiB") {
		t.Errorf("Read of a %d-byte input: %v, want a size error", MaxSize+12, err)
	}
}

// TestConvertWarnings: settings NVIDIA's plugin reads and ignores, and
// those that need more than the config, import with one warning line
// each naming the field; a blank ConfigMap key is skipped with one.
func TestConvertWarnings(t *testing.T) {
	const head = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"device count", head + "    - name: nvidia.com/gpu\n      devices: 2\n      replicas: 4\n",
			[]string{`sharing.timeSlicing.resources[0].devices: NVIDIA's plugin ignores it and shares every device of nvidia.com/gpu: imported as ["all-gpus"]`}},
		{"device list", head + "    - name: gpu\n      devices: [\"0\", 1]\n      replicas: 4\n",
			[]string{`sharing.timeSlicing.resources[0].devices: NVIDIA's plugin ignores it`}},
		{"rename", head + "    - name: gpu\n      rename: gpu-small\n      replicas: 4\n",
			[]string{`sharing.timeSlicing.resources[0].rename: NVIDIA's plugin ignores it (its replicas are nvidia.com/gpu, or nvidia.com/gpu.shared with renameByDefault): left out; to advertise them as nvidia.com/gpu-small, set resource = "nvidia.com/gpu-small"`}},
		{"rename as renameByDefault does", "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: gpu\n      rename: gpu.shared\n      replicas: 4\n", nil},
		{"envvar", "version: v1\nflags:\n  plugin:\n    deviceListStrategy: envvar\n",
			[]string{`flags.plugin.deviceListStrategy: "envvar" hands pods NVIDIA_VISIBLE_DEVICES with gpuctk's device names (0, mig-3, 0::1), which only gpuctk-runtime understands: run those pods with runtimeClassName: nvidia`}},
		{"MPS failRequestsGreaterThanOne false", "version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: false\n    resources:\n    - name: gpu\n      replicas: 4\n",
			[]string{"sharing.mps.failRequestsGreaterThanOne: false cannot be expressed for MPS"}},
		{"blank ConfigMap key", "kind: ConfigMap\napiVersion: v1\ndata:\n  default: ''\n  ls40: |\n    version: v1\n    sharing:\n      timeSlicing:\n        resources:\n        - name: nvidia.com/gpu\n          replicas: 10\n",
			[]string{"data.default: empty: skipped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outs, err := Convert([]byte(tc.in), "test")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range outs {
				got = append(got, o.Warnings...)
				for _, w := range o.Warnings {
					if o.TOML != nil && !bytes.Contains(o.TOML, []byte("# WARNING: "+strings.TrimPrefix(w, "data."+o.Key+"."))) {
						t.Errorf("warning %q is not in the output:\n%s", w, o.TOML)
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) || strings.Contains(got[i], "\n") {
					t.Errorf("warning %d:\n  %s\nwant one line starting\n  %s", i, got[i], w)
				}
			}
		})
	}
}

// TestLoad: a configuration file may hold gpuctk's TOML or NVIDIA's
// config, which runs converted; a missing file is the defaults unless
// named; an NVIDIA config gpuctk cannot run is one line naming the file.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nv := write("nv", "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    deviceListStrategy: envvar\n")
	cfg, warnings, err := Load(nv, true)
	if err != nil || cfg.Kubernetes.MIGStrategy != "mixed" || cfg.Path != nv || len(warnings) != 1 {
		t.Errorf("NVIDIA config: %+v, %q, %v", cfg, warnings, err)
	}
	toml := write("c.toml", "[kubernetes]\nmig-strategy = \"single\"\n")
	if cfg, _, err := Load(toml, true); err != nil || cfg.Kubernetes.MIGStrategy != "single" {
		t.Errorf("gpuctk config: %v", err)
	}
	if cfg, _, err := Load(write("blank", ""), true); err != nil || cfg.Kubernetes.MIGStrategy != "none" {
		t.Errorf("blank: %v", err)
	}
	if _, _, err := Load(filepath.Join(dir, "missing"), false); err != nil {
		t.Errorf("missing, not named: %v", err)
	}
	bad := write("bad", "version: v1\nflags:\n  gdsEnabled: true\n")
	_, _, err = Load(bad, true)
	if want := "config " + bad + ": an NVIDIA device plugin config gpuctk cannot run: line 3: flags.gdsEnabled: gpuctk does not inject GPUDirect Storage"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
}
