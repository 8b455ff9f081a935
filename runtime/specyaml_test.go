package runtime

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/internal/readfile"
)

// gpuctkSpecs are the specs gpuctk writes for the embedded profiles (the
// cdi package's golden files).
func gpuctkSpecs(t testing.TB) []string {
	paths, err := filepath.Glob("../cdi/testdata/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden specs in ../cdi/testdata: %v", err)
	}
	return paths
}

// specCuttings returns small specs cut from a spec gpuctk wrote, each at
// a line where a list item starts: its first two devices, and its first
// device with the start of its common edits.
func specCuttings(spec string) []string {
	lines := strings.SplitAfter(spec, "\n")
	var devices []int
	edits := -1
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "  - name: "):
			devices = append(devices, i)
		case l == "containerEdits:\n":
			edits = i
		}
	}
	var out []string
	if len(devices) > 2 {
		out = append(out, strings.Join(lines[:devices[2]], ""))
	}
	if len(devices) > 1 && edits > 0 {
		// Before an item of one of the edits' lists that is not its first.
		end := min(edits+60, len(lines)-1)
		for end > edits+2 && !(strings.HasPrefix(lines[end], "    - ") && !strings.HasSuffix(lines[end-1], ":\n")) {
			end--
		}
		out = append(out, strings.Join(lines[:devices[1]], "")+strings.Join(lines[edits:end], ""))
	}
	return out
}

// TestGpuctkYAMLAsLibrary: the specs gpuctk writes read the same through
// parseGpuctkYAML as through the CDI library, and pass its checks.
func TestGpuctkYAMLAsLibrary(t *testing.T) {
	for _, path := range gpuctkSpecs(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, _ := os.ReadFile(path)
			want, err := cdi.ParseSpec(data)
			if err != nil {
				t.Fatal(err)
			}
			got, js, err := parseGpuctkYAML(data)
			if err != nil {
				t.Fatalf("parseGpuctkYAML: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("parseGpuctkYAML differs from the library:\n%+v\nwant\n%+v", got, want)
			}
			checkSpecJSON(t, got, js)
			if err := validateSpec(got); err != nil {
				t.Errorf("validateSpec: %v", err)
			}
		})
	}
}

// checkSpecJSON: the JSON parseGpuctkYAML keeps of each edits, which a
// cache entry holds as it is, reads back as those edits and fits on an
// entry's line.
func checkSpecJSON(t *testing.T, s *cdispec.Spec, js *specJSON) {
	t.Helper()
	if len(js.devices) != len(s.Devices) {
		t.Fatalf("the JSON of %d devices' edits, for %d devices", len(js.devices), len(s.Devices))
	}
	check := func(what string, raw []byte, want *cdispec.ContainerEdits) {
		if raw == nil {
			if !reflect.DeepEqual(want, &cdispec.ContainerEdits{}) {
				t.Fatalf("%s: edits without their JSON", what)
			}
			return
		}
		if bytes.ContainsAny(raw, "\t\n") {
			t.Fatalf("%s: the JSON %q has a tab or newline", what, raw)
		}
		got, err := decodeEdits(raw)
		if err != nil {
			t.Fatalf("%s: the JSON %q does not read back: %v", what, raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the JSON %q reads back as\n%+v\nnot\n%+v", what, raw, got, want)
		}
	}
	check("the spec's edits", js.common, &s.ContainerEdits)
	for i := range s.Devices {
		check("device "+s.Devices[i].Name, js.devices[i], &s.Devices[i].ContainerEdits)
	}
}

// TestGpuctkYAMLRefuses: a spec that leaves the subset by anything is left
// to the library, which reads YAML whole (or refuses it).
func TestGpuctkYAMLRefuses(t *testing.T) {
	data, err := os.ReadFile("../cdi/testdata/h100.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec := string(data)
	for _, tt := range []struct{ name, old, new string }{
		{"no marker", "# Written by gpuctk.\n", ""},
		{"a comment", "devices:\n", "devices: # the devices\n"},
		{"a key in other case", "kind:", "Kind:"},
		{"an unknown key", "cdiVersion:", "annotations:\n  a: \"b\"\ncdiVersion:"},
		{"a repeated key", "kind: \"nvidia.com/gpu\"\n", "kind: \"nvidia.com/gpu\"\nkind: \"nvidia.com/gpu\"\n"},
		{"a tab", "  - name: \"0\"", "\t- name: \"0\""},
		{"a trailing space", "devices:\n", "devices: \n"},
		{"a blank line", "devices:\n", "devices:\n\n"},
		{"CRLF", "devices:\n", "devices:\r\n"},
		{"an escape YAML reads otherwise", `"nvidia.com/gpu"`, `"nvidia.com\/gpu"`},
		{"a plain string", `kind: "nvidia.com/gpu"`, `kind: nvidia.com/gpu`},
		{"a single-quoted string", `kind: "nvidia.com/gpu"`, `kind: 'nvidia.com/gpu'`},
		{"an octal-looking number", "major: 195", "major: 0303"},
		{"a hex number", "major: 195", "major: 0xc3"},
		{"an alias before its anchor", "containerEdits: &", "containerEdits: *nope\n    x: &"},
		{"an anchor off a device's edits", "      deviceNodes:\n", "      deviceNodes: &nodes\n"},
		{"a flow mapping", "containerEdits: &", "containerEdits: {}\n    y: &"},
		{"a second document", "cdiVersion:", "---\ncdiVersion:"},
		{"no final newline", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Replace(spec, tt.old, tt.new, 1)
			if tt.old == "" {
				in = strings.TrimSuffix(spec, "\n")
			}
			if in == spec {
				t.Fatalf("the edit %q -> %q changed nothing", tt.old, tt.new)
			}
			if _, _, err := parseGpuctkYAML([]byte(in)); !errors.Is(err, errNotOurs) {
				t.Errorf("parseGpuctkYAML took it: %v", err)
			}
		})
	}
}

// TestGpuctkSpecCreate: a create resolved through parseGpuctkYAML writes
// the same config.json as one through the library, which reads the same
// spec without the marker line.
func TestGpuctkSpecCreate(t *testing.T) {
	for _, path := range gpuctkSpecs(t) {
		data, _ := os.ReadFile(path)
		ours, lib := t.TempDir(), t.TempDir()
		os.WriteFile(filepath.Join(ours, "nvidia.yaml"), data, 0o644)
		os.WriteFile(filepath.Join(lib, "nvidia.yaml"), bytes.TrimPrefix(data, []byte("# Written by gpuctk.\n")), 0o644)
		if _, _, err := gpuctkSpec([]string{ours}); err != nil {
			t.Fatalf("%s: gpuctkSpec: %v", path, err)
		}
		if _, _, err := gpuctkSpec([]string{lib}); err == nil {
			t.Fatalf("%s without its marker: gpuctkSpec took it", path)
		}
		for _, devices := range []string{"0", "all", "0,1", "mig-0", "mig-0::0,mig-1::3", "no-such-device"} {
			var got [2]string
			for i, dir := range []string{ours, lib} {
				f := newFixture(t, withEnv(devices))
				f.rt.cfg.CDI.SpecDirs = []string{dir}
				err := f.rt.Run([]string{"create", "--bundle", f.bundle, "ctr1"})
				out, _ := os.ReadFile(f.config)
				got[i] = string(out)
				if err != nil {
					got[i] = strings.ReplaceAll(err.Error(), dir, "DIR")
				}
			}
			if got[0] != got[1] {
				t.Errorf("%s, %s: through gpuctkSpec:\n%s\nthrough the library:\n%s", filepath.Base(path), devices, got[0], got[1])
			}
		}
	}
}

// FuzzGpuctkYAML: whatever parseGpuctkYAML takes, the library reads the
// same.
func FuzzGpuctkYAML(f *testing.F) {
	// Cuttings of the golden specs, not the specs: at 30 to 90 KB each the
	// fuzzer ran a dozen inputs a minute. TestGpuctkYAMLAsLibrary reads
	// them whole.
	for _, path := range gpuctkSpecs(f) {
		data, _ := os.ReadFile(path)
		for _, seed := range specCuttings(string(data)) {
			f.Add([]byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, js, err := parseGpuctkYAML(data)
		if err != nil {
			return
		}
		checkSpecJSON(t, got, js)
		want, err := cdi.ParseSpec(data)
		if err != nil {
			t.Fatalf("parseGpuctkYAML took what the library refuses (%v):\n%q", err, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parseGpuctkYAML differs from the library:\n%+v\nwant\n%+v\ninput %q", got, want, data)
		}
	})
}

// TestSpecCuttings: the fuzz seeds cut from the golden specs are specs
// both parsers take, so the fuzzer starts from inputs that get past the
// first error.
func TestSpecCuttings(t *testing.T) {
	for _, path := range gpuctkSpecs(t) {
		data, _ := os.ReadFile(path)
		cuts := specCuttings(string(data))
		if len(cuts) != 2 {
			t.Errorf("%s: %d cuttings, want 2", path, len(cuts))
		}
		for i, c := range cuts {
			got, _, err := parseGpuctkYAML([]byte(c))
			if err != nil {
				t.Errorf("%s cutting %d: %v\n%s", path, i, err, c)
				continue
			}
			want, err := cdi.ParseSpec([]byte(c))
			if err != nil {
				t.Errorf("%s cutting %d: the library refuses it: %v", path, i, err)
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s cutting %d: parseGpuctkYAML differs from the library", path, i)
			}
		}
	}
}

// TestGpuctkSpecUnfit: the one spec file of the folder is read through
// the gate: a 1 GiB sparse file is refused by its size, not read (before,
// os.ReadFile took the GiB); the library's child then says what it is.
func TestGpuctkSpecUnfit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "nvidia.yaml")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1<<30); err != nil {
		t.Fatal(err)
	}
	var tl *readfile.TooLargeError
	if _, _, err := gpuctkSpec([]string{dir}); !errors.As(err, &tl) || tl.Size != 1<<30 {
		t.Errorf("%v, want it refused by its size", err)
	}
}
