package cdientry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// goldenSpecs are the specs gpuctk writes for the simulated hosts, as
// the CDI library reads them.
func goldenSpecs(t testing.TB) []*cdispec.Spec {
	t.Helper()
	paths, err := filepath.Glob("../../cdi/testdata/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden specs in ../../cdi/testdata: %v", err)
	}
	var out []*cdispec.Spec
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := cdi.ParseSpec(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, s)
	}
	return out
}

func checkEdits(t *testing.T, e *cdispec.ContainerEdits) {
	t.Helper()
	want, err := json.Marshal(e)
	if err != nil {
		return
	}
	if got := AppendEdits(nil, e); !bytes.Equal(got, want) {
		t.Fatalf("AppendEdits:\n%s\nencoding/json:\n%s", got, want)
	}
}

// TestAppendEditsGolden: every device's and every spec's edits encode
// as encoding/json encodes them.
func TestAppendEditsGolden(t *testing.T) {
	for _, s := range goldenSpecs(t) {
		checkEdits(t, &s.ContainerEdits)
		for i := range s.Devices {
			checkEdits(t, &s.Devices[i].ContainerEdits)
		}
	}
	checkEdits(t, nil)
	checkEdits(t, &cdispec.ContainerEdits{})
}

// FuzzAppendEdits: whatever encoding/json decodes into edits, AppendEdits
// encodes as encoding/json does.
func FuzzAppendEdits(f *testing.F) {
	for _, s := range goldenSpecs(f) {
		for _, e := range []*cdispec.ContainerEdits{&s.ContainerEdits, &s.Devices[0].ContainerEdits} {
			data, _ := json.Marshal(e)
			f.Add(data)
		}
	}
	f.Add([]byte(`{"deviceNodes":[null,{"path":"<a>&","fileMode":420,"uid":0,"gid":7,"major":-1}],"hooks":[{"hookName":"x","path":"/p","timeout":-3,"env":[]}],` +
		`"netDevices":[{"hostInterfaceName":"e\u2028","name":""}],"intelRdt":{"enableMonitoring":true,"schemata":["a"]},"additionalGids":[0,4294967295],"mounts":[null]}`))
	f.Add([]byte(`{"intelRdt":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e cdispec.ContainerEdits
		if json.Unmarshal(data, &e) != nil {
			return
		}
		checkEdits(t, &e)
	})
}

// TestEncode: an entry's lines, as `gpuctk cdi resolve` and the runtime
// write them, are those of the format: errors sorted, then specs, then
// devices, each with its edits as encoding/json writes them, shared
// edits encoded once.
func TestEncode(t *testing.T) {
	var specs []Spec
	var devices []Device
	for id, s := range goldenSpecs(t) {
		specs = append(specs, Spec{Kind: s.Kind, Edits: &s.ContainerEdits})
		for i := range s.Devices {
			devices = append(devices, Device{Name: s.Kind + "=" + s.Devices[i].Name, Spec: id, Edits: &s.Devices[i].ContainerEdits})
		}
	}
	errs := []string{"z: <bad>", "a: \"quoted\"\tand tabbed"}
	got, err := Encode(errs, specs, devices)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	want.WriteString(Head)
	for _, e := range slices.Sorted(slices.Values(errs)) {
		js, _ := json.Marshal(e)
		fmt.Fprintf(&want, "error\t%s\n", js)
	}
	for id, s := range specs {
		js, _ := json.Marshal(s.Edits)
		fmt.Fprintf(&want, "spec\t%d\t%s\t%s\n", id, s.Kind, js)
	}
	for _, d := range devices {
		js, _ := json.Marshal(d.Edits)
		fmt.Fprintf(&want, "device\t%s\t%d\t%s\n", d.Name, d.Spec, js)
	}
	want.WriteString("end\n")
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("Encode differs from the format's reference encoding:\n%.2000s\nwant\n%.2000s", got, want.Bytes())
	}
	// Edits given as JSON already go in as given, beside others encoded.
	edits := &cdispec.ContainerEdits{Env: []string{"A=1"}}
	got, err = Encode(nil, []Spec{{Kind: "v/c", Edits: edits, JSON: []byte(`{"env":["S=1"]}`)}},
		[]Device{{Name: "v/c=0", Edits: edits, JSON: []byte(`{"env":["B=2"]}`)}, {Name: "v/c=1", Edits: edits}})
	if err != nil {
		t.Fatal(err)
	}
	if want := Head + "spec\t0\tv/c\t{\"env\":[\"S=1\"]}\ndevice\tv/c=0\t0\t{\"env\":[\"B=2\"]}\ndevice\tv/c=1\t0\t{\"env\":[\"A=1\"]}\nend\n"; string(got) != want {
		t.Errorf("Encode with JSON given:\n%s\nwant\n%s", got, want)
	}
	if _, err := Encode(nil, nil, []Device{{Name: "a\tb"}}); err == nil {
		t.Error("a device name with a tab was encoded")
	}
	if _, err := Encode(nil, []Spec{{Kind: "k\n"}}, nil); err == nil {
		t.Error("a kind with a newline was encoded")
	}
}
