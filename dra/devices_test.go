package dra

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// resolve resolves a simulated host under a configuration.
func resolve(t testing.TB, profile, toml string) *offer.Set {
	t.Helper()
	cfg, err := config.Parse([]byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	set, err := offer.Resolve(fakehost.Host(t, profile), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestGolden compares the devices published for every embedded profile,
// and for shared ones, with testdata/NAME.yaml (go test ./dra -update
// rewrites them): each device's ResourceSlice entry and its CDI name.
func TestGolden(t *testing.T) {
	type tc struct{ name, profile, toml string }
	var cases []tc
	for _, p := range inventory.Profiles() {
		cases = append(cases, tc{p, p, ""})
	}
	cases = append(cases,
		tc{"l40s-time-slicing", "l40s", "[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"},
		tc{"p100-mps", "p100", "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 2\n"},
		tc{"dgx-a100-mig-shared", "dgx-a100", "[[sharing]]\ndevices = [\"1g.5gb\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"},
	)
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set := resolve(t, c.profile, c.toml)
			type entry struct {
				CDI    string             `json:"cdi"`
				Device resourceapi.Device `json:"device"`
			}
			var entries []entry
			seen := map[string]bool{}
			for _, d := range Devices(set) {
				if !label.MatchString(d.Name) || len(d.Name) > 63 || seen[d.Name] {
					t.Errorf("device name %q is not a unique DNS label", d.Name)
				}
				seen[d.Name] = true
				a := d.API(set.Host)
				if n := len(a.Attributes) + len(a.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
					t.Errorf("%s: %d attributes and capacities, over the API's %d", d.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
				}
				entries = append(entries, entry{d.CDIName("nvidia.com/gpu"), a})
			}
			got, err := yaml.Marshal(entries)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", c.name+".yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./dra -update writes it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("devices differ from %s:\n got:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}

// TestSlices: a pool of more devices than a ResourceSlice holds is split;
// one without devices is one empty slice.
func TestSlices(t *testing.T) {
	set := resolve(t, "dgx-h100-mig", "[[sharing]]\ndevices = [\"mig\"]\nstrategy = \"time-slicing\"\nreplicas = 3\n")
	devs := Devices(set)
	slices := Slices(set.Host, devs)
	if len(devs) != 168 || len(slices) != 2 || len(slices[0]) != 128 || len(slices[1]) != 40 {
		t.Errorf("%d devices in slices of %d and %d, want 168 in 128 and 40", len(devs), len(slices[0]), len(slices[len(slices)-1]))
	}
	if s := Slices(&inventory.Host{}, nil); len(s) != 1 || len(s[0]) != 0 {
		t.Errorf("no devices: %d slices, want one empty", len(s))
	}
}

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{"9.0": "9.0.0", "580.65.06": "580.65.6", "13.0": "13.0.0", "12": "12.0.0", "": "", "1.2.3.4": "", "5.x": ""} {
		if got := semver(in); got != want {
			t.Errorf("semver(%q) = %q, want %q", in, got, want)
		}
	}
}
