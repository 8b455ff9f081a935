package runtime

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// TestDecodeEdits: decodeEdits reads what encoding/json writes of every
// spec's and device's edits in the golden specs' entries, and hand-made
// edits with every field and the strings JSON escapes, as encoding/json
// reads them; what it does not take, it refuses, never misreads.
func TestDecodeEdits(t *testing.T) {
	goldens, err := filepath.Glob("../cdi/testdata/*.yaml")
	if err != nil || len(goldens) == 0 {
		t.Fatalf("golden specs: %v, %v", goldens, err)
	}
	var docs [][]byte
	for _, golden := range goldens {
		dir := t.TempDir()
		data, _ := os.ReadFile(golden)
		os.WriteFile(filepath.Join(dir, "nvidia.yaml"), data, 0o644)
		entry, err := libraryResolver([]string{dir})
		if err != nil {
			t.Fatal(err)
		}
		for l := range bytes.SplitSeq(entry, []byte("\n")) {
			if f := bytes.Split(l, []byte("\t")); len(f) == 4 {
				docs = append(docs, f[3])
			}
		}
	}
	mode, id, timeout := os.FileMode(0o620), uint32(1000), 30
	all, _ := json.Marshal(&cdispec.ContainerEdits{
		Env: []string{"A=1", "Q=\"quoted\" \\ <tag> & \u2028 \x01 é 😀", "BAD=\xff\xfe"},
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/x", HostPath: "/h", Type: "c", Major: -1, Minor: 1 << 40,
			FileMode: &mode, Permissions: "rw", UID: &id, GID: &id}},
		NetDevices:     []*cdispec.LinuxNetDevice{{HostInterfaceName: "eth0", Name: "net0"}},
		Hooks:          []*cdispec.Hook{{HookName: "createContainer", Path: "/bin/h", Args: []string{"h", ""}, Env: []string{"X=1"}, Timeout: &timeout}},
		Mounts:         []*cdispec.Mount{{HostPath: "/a", ContainerPath: "/b", Options: []string{"ro", "nosuid"}, Type: "bind"}},
		IntelRdt:       &cdispec.IntelRdt{ClosID: "c", L3CacheSchema: "L3", MemBwSchema: "MB", Schemata: []string{"s"}, EnableMonitoring: true},
		AdditionalGIDs: []uint32{0, 4294967295},
	})
	docs = append(docs, all, []byte(`{}`), []byte(` { "env" : [ "A=1" ] , "mounts":null } `),
		[]byte(`{"env":["\ud83d\ude00 \ud83d x \udc00 \u00e9\/\b\f\n\r\t"]}`))
	for _, doc := range docs {
		var want cdispec.ContainerEdits
		if err := json.Unmarshal(doc, &want); err != nil {
			t.Fatalf("%s: encoding/json: %v", doc, err)
		}
		got, err := decodeEdits(doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("%s:\ndecodeEdits %+v\nencoding/json %+v", doc, got, &want)
		}
	}

	for _, bad := range []string{``, `null`, `[]`, `{"env":["a"]`, `{"env":["a"]}x`, `{"Env":["a"]}`, `{"env":["a"],"env":["b"]}`,
		`{"unknown":1}`, `{"deviceNodes":[{"path":"/x","major":1.5}]}`, `{"deviceNodes":[{"path":"/x","uid":-1}]}`,
		`{"deviceNodes":[{"path":"/x","minor":99999999999999999999}]}`, `{"env":["a\qb"]}`, `{"env":["a` + "\n" + `"]}`,
		`{"env":["\u12"]}`, `{"intelRdt":{"enableMonitoring":1}}`, `{"env":[1]}`, `{"env":["a",]}`} {
		if e, err := decodeEdits([]byte(bad)); err == nil {
			t.Errorf("%s: decoded as %+v, want an error", bad, e)
		}
	}
}

// FuzzDecodeEdits: whatever decodeEdits reads, encoding/json reads the
// same.
func FuzzDecodeEdits(f *testing.F) {
	for _, s := range []string{`{}`, `{"env":["A=1","\u00e9\ud83d\ude00"]}`, `{"deviceNodes":[{"path":"/dev/x","major":195,"fileMode":438,"uid":0}]}`,
		`{"hooks":[{"hookName":"createContainer","path":"/h","args":["a"],"timeout":5}],"mounts":[{"hostPath":"/a","containerPath":"/b","options":["ro"]}]}`,
		`{"intelRdt":{"closID":"x","enableMonitoring":false},"additionalGids":[1],"netDevices":[{"hostInterfaceName":"a","name":"b"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeEdits(data)
		if err != nil {
			return
		}
		var want cdispec.ContainerEdits
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("decodeEdits read %q, which encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("%q: decodeEdits %+v, encoding/json %+v", data, got, &want)
		}
	})
}
