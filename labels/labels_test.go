package labels

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestGolden compares the labels of simulated hosts under several configs
// with testdata/NAME.txt (go test ./labels -update rewrites them).
func TestGolden(t *testing.T) {
	for _, tc := range []struct{ name, profile, toml string }{
		{"dgx-a100-none", "dgx-a100", ""},
		{"dgx-a100-mixed", "dgx-a100", "[kubernetes]\nmig-strategy = \"mixed\"\n"},
		{"h100-single", "h100", "[kubernetes]\nmig-strategy = \"single\"\n"},
		{"l40s-time-slicing", "l40s", "[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n"},
		{"l40s-time-slicing-renamed", "l40s", "[kubernetes]\nrename-shared = true\n[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n"},
		{"p100-mps", "p100", "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 8\n"},
		{"h100-single-mps", "h100", "[kubernetes]\nmig-strategy = \"single\"\n[[sharing]]\ndevices = [\"mig\"]\nstrategy = \"mps\"\nreplicas = 2\n"},
		// Single on GPUs in and out of MIG mode, with MIG devices of
		// three profiles: GPU feature discovery's invalid labels.
		{"dgx-a100-single-invalid", "dgx-a100", "[kubernetes]\nmig-strategy = \"single\"\n"},
		// Under mixed, each profile's replicas: 1g.5gb time-sliced as
		// nvidia.com/mig-1g.5gb (-SHARED), 3g.20gb through MPS under a
		// resource of its own (no -SHARED), 2g.10gb not shared.
		{"dgx-a100-mixed-shared", "dgx-a100", "[kubernetes]\nmig-strategy = \"mixed\"\n" +
			"[[sharing]]\ndevices = [\"1g.5gb\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n" +
			"[[sharing]]\ndevices = [\"3g.20gb\"]\nstrategy = \"mps\"\nreplicas = 2\nresource = \"nvidia.com/mig-3g.20gb-mps\"\n"},
		{"dgx-a100-mixed-shared-renamed", "dgx-a100", "[kubernetes]\nmig-strategy = \"mixed\"\nrename-shared = true\n" +
			"[[sharing]]\ndevices = [\"1g.5gb\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := labelsOf(t, fakehost.Host(t, tc.profile), tc.toml).Lines()
			golden := filepath.Join("testdata", tc.name+".txt")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./labels -update writes it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("labels differ from %s:\n got:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p, err := Labels{"nvidia.com/gpu.count": "2", "nvidia.com/gpu.present": "true"}.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(data), "\nnvidia.com/gpu.count=2\nnvidia.com/gpu.present=true\n") || filepath.Base(p) != FeatureFile {
		t.Errorf("%s:\n%s", p, data)
	}
	// A missing features.d is made; a file in its way is an error.
	if _, err := (Labels{}).Write(filepath.Join(dir, "missing", "dir")); err != nil {
		t.Errorf("write to a missing folder: %v", err)
	}
	if _, err := (Labels{}).Write(p); err == nil || !strings.Contains(err.Error(), "labels: ") {
		t.Errorf("write under a file: %v", err)
	}
}

func TestSliceCountsAndFamily(t *testing.T) {
	for _, tc := range []struct {
		profile string
		gi, ci  int
	}{{"1g.5gb", 1, 1}, {"3g.20gb", 3, 3}, {"1c.3g.20gb", 3, 1}, {"1g.10gb+me", 1, 1}, {"7g.80gb", 7, 7}} {
		if gi, ci := sliceCounts(tc.profile); gi != tc.gi || ci != tc.ci {
			t.Errorf("%s: %d, %d; want %d, %d", tc.profile, gi, ci, tc.gi, tc.ci)
		}
	}
	for _, tc := range []struct {
		cc, want string
	}{{"6.0", "pascal"}, {"7.0", "volta"}, {"7.5", "turing"}, {"8.0", "ampere"}, {"8.6", "ampere"}, {"8.9", "ada-lovelace"}, {"9.0", "hopper"}, {"10.0", "blackwell"}, {"", "undefined"}} {
		if got := inventory.Architecture(tc.cc); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.cc, got, tc.want)
		}
	}
}

// checkValid fails for every label Kubernetes would refuse: Node Feature
// Discovery drops such a label (and logs it), so a nodeSelector on it
// never matches.
func checkValid(t *testing.T, l Labels) {
	t.Helper()
	for k, v := range l {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("%s=%q: %s", k, v, strings.Join(errs, "; "))
		}
	}
}

// TestMIGProfileAttribute: a MIG profile with an attribute (1g.10gb+me)
// is advertised as nvidia.com/mig-1g.10gb.me, as NVIDIA's plugin does;
// its labels are named as GPU feature discovery names them, after that
// resource, and hold no '+', which no label key or value may. Its engines
// are the MIG device's, as NVML reports them: a +me instance has the
// GPU's optical flow accelerator.
func TestMIGProfileAttribute(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		want     map[string]string
	}{
		{"mixed", map[string]string{
			"nvidia.com/mig-1g.10gb.me.count":       "1",
			"nvidia.com/mig-1g.10gb.me.product":     "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me",
			"nvidia.com/mig-1g.10gb.me.engines.ofa": "1",
			"nvidia.com/mig-1g.10gb.engines.ofa":    "0",
		}},
		{"single", map[string]string{
			"nvidia.com/gpu.product":     "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me",
			"nvidia.com/gpu.engines.ofa": "1",
		}},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			h := fakehost.Host(t, "h100")
			me := inventory.Engines{Copy: 1, Decoder: 1, JPEG: 1, OFA: 1}
			if tc.strategy == "single" {
				for i := range h.GPUs[0].MIG {
					h.GPUs[0].MIG[i].Profile, h.GPUs[0].MIG[i].Engines = "1g.10gb+me", me
				}
			} else {
				h.GPUs[0].MIG[0].Profile, h.GPUs[0].MIG[0].Engines = "1g.10gb+me", me
			}
			l := labelsOf(t, h, "[kubernetes]\nmig-strategy = \""+tc.strategy+"\"\n")
			checkValid(t, l)
			for k, v := range tc.want {
				if l[k] != v {
					t.Errorf("%s=%q, want %q", k, l[k], v)
				}
			}
		})
	}
}

// TestLongProductName: the RTX PRO 6000 Blackwell editions have names of
// 44 to 55 characters and MIG devices: with "-MIG-<profile>" (and
// "-SHARED") a product label exceeds the 63 characters a label value may
// hold. The name is shortened, never the suffixes that tell MIG devices
// and replicas apart.
func TestLongProductName(t *testing.T) {
	for _, tc := range []struct {
		name, toml, key, suffix string
	}{
		{"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "[kubernetes]\nmig-strategy = \"mixed\"\n",
			"nvidia.com/mig-1g.24gb.product", "-MIG-1g.24gb"},
		{"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "[kubernetes]\nmig-strategy = \"single\"\n[[sharing]]\ndevices = [\"mig\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n",
			"nvidia.com/gpu.product", "-MIG-1g.24gb-SHARED"},
		{"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n",
			"nvidia.com/gpu.product", "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition-SHARED"},
	} {
		t.Run(tc.key+tc.suffix, func(t *testing.T) {
			h := fakehost.Host(t, "h100")
			h.GPUs[0].Name = tc.name
			for i := range h.GPUs[0].MIG {
				h.GPUs[0].MIG[i].Profile = "1g.24gb"
			}
			if !strings.Contains(tc.toml, "mig-strategy") {
				h.GPUs[0].MIGEnabled, h.GPUs[0].MIG = false, nil
			}
			l := labelsOf(t, h, tc.toml)
			checkValid(t, l)
			if v := l[tc.key]; !strings.HasPrefix(v, "NVIDIA-RTX-PRO-6000-Blackwell") || !strings.HasSuffix(v, tc.suffix) {
				t.Errorf("%s=%q, want NVIDIA-RTX-PRO-6000-Blackwell...%s", tc.key, v, tc.suffix)
			}
		})
	}
}

// TestSingleInvalid: under single, a node whose GPUs are not all in MIG
// mode with MIG devices of one profile gets GPU feature discovery's
// invalid labels, replicas or not: gpu.product <name>-MIG-INVALID, 0
// devices, replicas and memory, an empty sharing strategy, and none of the
// MIG device's labels, so no nodeSelector for a product or a size picks
// it. A node with no GPU in MIG mode is labelled as its whole GPUs.
func TestSingleInvalid(t *testing.T) {
	invalid := map[string]string{
		"gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID", "gpu.count": "0", "gpu.replicas": "0",
		"gpu.sharing-strategy": "none", "gpu.memory": "0", "mig.strategy": "single",
	}
	for _, tc := range []struct {
		name    string
		profile string
		change  func(h *inventory.Host)
		sharing string
		want    map[string]string
	}{
		{"two profiles", "h100", func(h *inventory.Host) { h.GPUs[0].MIG[6].Profile = "1g.20gb" }, "", invalid},
		{"MIG mode without MIG devices", "h100", func(h *inventory.Host) { h.GPUs[0].MIG = nil }, "", invalid},
		{"one GPU of eight without MIG devices", "dgx-h100-mig", func(h *inventory.Host) { h.GPUs[5].MIG = nil }, "", invalid},
		{"one GPU of eight out of MIG mode", "dgx-h100-mig", func(h *inventory.Host) {
			h.GPUs[7].MIGEnabled, h.GPUs[7].MIG = false, nil
		}, "", invalid},
		{"two profiles, MIG devices shared", "h100", func(h *inventory.Host) { h.GPUs[0].MIG[6].Profile = "1g.20gb" },
			"[[sharing]]\ndevices = [\"mig\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n", invalid},
		{"no GPU in MIG mode", "h100", func(h *inventory.Host) { h.GPUs[0].MIGEnabled, h.GPUs[0].MIG = false, nil }, "",
			map[string]string{"gpu.product": "NVIDIA-H100-80GB-HBM3", "gpu.count": "1", "gpu.replicas": "1",
				"gpu.sharing-strategy": "none", "gpu.memory": "81559", "mig.strategy": "single"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fakehost.Host(t, tc.profile)
			tc.change(h)
			l := labelsOf(t, h, "[kubernetes]\nmig-strategy = \"single\"\n"+tc.sharing)
			checkValid(t, l)
			for k, v := range tc.want {
				if got, ok := l[Prefix+k]; !ok || got != v {
					t.Errorf("%s=%q, want %q", k, got, v)
				}
			}
			for _, k := range []string{"gpu.multiprocessors", "gpu.slices.gi", "gpu.slices.ci", "gpu.engines.copy", "gpu.engines.ofa"} {
				if v, ok := l[Prefix+k]; ok {
					t.Errorf("%s=%s, want no such label", k, v)
				}
			}
		})
	}
}

// TestGPUReplicas: gpu.replicas, gpu.sharing-strategy and the -SHARED of
// gpu.product describe the replicas of nvidia.com/gpu's devices (whole
// GPUs; MIG devices under single), also when an entry's resource
// advertises them under another name, as GPU feature discovery labels a
// renamed nvidia.com/gpu. MIG devices shared under mixed leave them alone:
// their profiles' labels say so. Under mixed on a node whose GPUs are all
// in MIG mode, no nvidia.com/gpu is advertised: 0 replicas, as GPU feature
// discovery labels a GPU in MIG mode.
func TestGPUReplicas(t *testing.T) {
	for _, tc := range []struct {
		name, profile, toml             string
		replicas, strategy, productTail string
	}{
		// Every GPU in MIG mode: nvidia.com/gpu is not advertised at all,
		// and GPU feature discovery says 0 replicas.
		{"mixed, MIG devices shared", "h100",
			"[kubernetes]\nmig-strategy = \"mixed\"\n[[sharing]]\ndevices = [\"mig\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n",
			"0", "none", "HBM3"},
		{"mixed, every GPU in MIG mode", "dgx-h100-mig", "[kubernetes]\nmig-strategy = \"mixed\"\n", "0", "none", "HBM3"},
		// Under none a GPU in MIG mode goes out whole, as nvidia.com/gpu.
		{"none, a GPU in MIG mode", "h100", "", "1", "none", "HBM3"},
		{"mixed, a whole GPU and MIG devices shared", "dgx-a100",
			"[kubernetes]\nmig-strategy = \"mixed\"\n[[sharing]]\ndevices = [\"1g.5gb\"]\nstrategy = \"mps\"\nreplicas = 2\n[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 3\nresource = \"nvidia.com/gpu-ts\"\n",
			"3", "time-slicing", "40GB"},
		{"whole GPUs under a resource of their own", "l40s",
			"[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 4\nresource = \"nvidia.com/gpu-shared\"\n",
			"4", "time-slicing", "L40S"},
		{"single, MIG devices under a resource of their own", "h100",
			"[kubernetes]\nmig-strategy = \"single\"\n[[sharing]]\ndevices = [\"mig\"]\nstrategy = \"mps\"\nreplicas = 2\nresource = \"nvidia.com/gpu-mps\"\n",
			"2", "mps", "MIG-1g.10gb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := labelsOf(t, fakehost.Host(t, tc.profile), tc.toml)
			if got := l[Prefix+"gpu.replicas"]; got != tc.replicas {
				t.Errorf("gpu.replicas=%s, want %s", got, tc.replicas)
			}
			if got := l[Prefix+"gpu.sharing-strategy"]; got != tc.strategy {
				t.Errorf("gpu.sharing-strategy=%s, want %s", got, tc.strategy)
			}
			if got := l[Prefix+"gpu.product"]; !strings.HasSuffix(got, "-"+tc.productTail) {
				t.Errorf("gpu.product=%s, want it to end in -%s (no -SHARED)", got, tc.productTail)
			}
		})
	}
}

// TestMIGCapable: mig.capable is true on a node whose GPU can run in MIG
// mode while it is off (GPU feature discovery asks NVML; NVIDIA's GPU
// operator deploys its MIG manager on such nodes), false otherwise.
func TestMIGCapable(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"NVIDIA A100-SXM4-40GB", true},
		{"NVIDIA A800-SXM4-80GB", true},
		{"NVIDIA A800 80GB PCIe", true},
		{"NVIDIA H100 NVL", true},
		{"NVIDIA GB300", true},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", true},
		{"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", true},
		{"NVIDIA L40S", false},
		{"NVIDIA RTX A6000", false},
		{"NVIDIA GeForce RTX 5090", false},
		{"Tesla P100-PCIE-16GB", false},
	} {
		h := fakehost.Host(t, "l40s")
		for i := range h.GPUs {
			h.GPUs[i].Name = tc.name
		}
		if got := migCapable(h); got != tc.want {
			t.Errorf("%s: mig.capable %t, want %t", tc.name, got, tc.want)
		}
	}
}

// labelsOf returns the labels of host h under the configuration text.
func labelsOf(t *testing.T, h *inventory.Host, toml string) Labels {
	t.Helper()
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	set, err := offer.Resolve(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := For(set, cfg.Kubernetes)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestGFDDocumented compares the labels of the hosts GPU feature
// discovery's documentation shows with the values it documents
// (testdata/gfd, copied with their source): every documented label is
// written with that value, but for the exceptions named here.
func TestGFDDocumented(t *testing.T) {
	for _, tc := range []struct {
		name, toml string
		// differ are the documented labels gpuctk writes otherwise, and why.
		differ map[string]string
	}{
		{"readme", "", map[string]string{
			"gfd.timestamp": "optional in GFD (--no-timestamp); gpuctk writes none, so its labels change only when the node does",
			"gpu.machine":   "the example predates GFD's sanitise (internal/lm): a space is no label value; GFD writes NVIDIA-DGX-2H",
		}},
		{"table", "[kubernetes]\nrename-shared = true\n[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 4\n", map[string]string{
			"gfd.timestamp": "optional in GFD; gpuctk writes none",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := inventory.LoadProfile(filepath.Join("testdata", "gfd", tc.name+"-host.toml"))
			if err != nil {
				t.Fatal(err)
			}
			h, _ := p.Host()
			got := labelsOf(t, h, tc.toml)
			data, err := os.ReadFile(filepath.Join("testdata", "gfd", tc.name+"-example.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, line := range strings.Split(string(data), "\n") {
				key, value, ok := strings.Cut(strings.TrimSpace(line), ": ")
				if !ok || strings.HasPrefix(key, "#") {
					continue
				}
				n++
				value = strings.Trim(value, `"`)
				short := strings.TrimPrefix(key, Prefix)
				if why, ok := tc.differ[short]; ok {
					t.Logf("%s: documented %q, gpuctk %q: %s", key, value, got[key], why)
					continue
				}
				if v, ok := got[key]; !ok || v != value {
					t.Errorf("%s = %q (written: %t), documented %q", key, v, ok, value)
				}
			}
			if n < 10 {
				t.Fatalf("read %d documented labels, want the example's", n)
			}
		})
	}
	if got := machine("NVIDIA DGX-2H"); got != "NVIDIA-DGX-2H" {
		t.Errorf(`machine("NVIDIA DGX-2H") = %q, want GFD's NVIDIA-DGX-2H`, got)
	}
}

// TestWriteTakesPathBack: a FIFO, a link out or a folder at the feature
// file's path is replaced by the file, never followed.
func TestWriteTakesPathBack(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "host")
	os.WriteFile(outside, []byte("host"), 0o644)
	for name, plant := range map[string]func(string) error{
		"FIFO":   func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"link":   func(p string) error { return os.Symlink(outside, p) },
		"folder": func(p string) error { return os.MkdirAll(filepath.Join(p, "x"), 0o755) },
	} {
		dir := t.TempDir()
		if err := plant(filepath.Join(dir, FeatureFile)); err != nil {
			t.Fatal(err)
		}
		p, err := Labels{"nvidia.com/gpu.count": "2"}.Write(dir)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v %v", name, fi, err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Errorf("the link's target changed: %q", b)
	}
}
