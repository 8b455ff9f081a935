package runtime

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// TestMarshalMember: marshalMember writes every editable member of the
// configs the golden specs' devices make, and hand-made values with every
// field, byte for byte as encoding/json does.
func TestMarshalMember(t *testing.T) {
	var values []any
	add := func(s *specs.Spec) {
		for _, m := range editableMembers {
			values = append(values, m.field(s))
		}
	}
	goldens, _ := filepath.Glob("../cdi/testdata/*.yaml")
	for _, golden := range goldens {
		dir := t.TempDir()
		data, _ := os.ReadFile(golden)
		os.WriteFile(filepath.Join(dir, "nvidia.yaml"), data, 0o644)
		cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range cache.ListDevices() {
			if i%7 != 0 && name != cache.ListDevices()[len(cache.ListDevices())-1] {
				continue // a sample: the devices of a spec differ little
			}
			for _, cfg := range baseConfigs(t) {
				s := clone(t, cfg)
				add(s)
				if _, err := cache.InjectDevices(s, name); err != nil {
					t.Fatal(err)
				}
				add(s)
			}
		}
	}
	odd := "\"q\" \\ <a> & \x00\x1f\x7f\b\f\n\r\t é 😀 \u2028\u2029 \xff \xed\xa0\x80"
	mode, id, timeout, n := os.FileMode(0o7777), uint32(4294967295), -1, int64(-5)
	values = append(values, nil, []string(nil), []string{}, []string{odd, ""}, []uint32(nil), []uint32{}, []uint32{0, 4294967295},
		[]specs.Mount(nil), []specs.Mount{}, []specs.Mount{{Destination: odd}, {Destination: "/a", Type: "bind", Source: "/b", Options: []string{}, UIDMappings: []specs.LinuxIDMapping{{ContainerID: 1, HostID: 2, Size: 3}}, GIDMappings: []specs.LinuxIDMapping{{}, {HostID: 4294967295}}}},
		(*specs.Hooks)(nil), &specs.Hooks{}, &specs.Hooks{Prestart: []specs.Hook{{}}, CreateRuntime: []specs.Hook{{Path: odd, Args: []string{"a"}, Env: []string{}, Timeout: &timeout}},
			CreateContainer: []specs.Hook{{Path: "/c"}, {Path: "/d", Env: []string{"E=1"}}}, StartContainer: []specs.Hook{{}}, Poststart: []specs.Hook{{}}, Poststop: []specs.Hook{{Path: "/z"}}},
		[]specs.LinuxDevice(nil), []specs.LinuxDevice{}, []specs.LinuxDevice{{}, {Path: odd, Type: "c", Major: -1, Minor: 1 << 40, FileMode: &mode, UID: &id, GID: &id}},
		[]specs.LinuxDeviceCgroup(nil), []specs.LinuxDeviceCgroup{{}, {Allow: true, Type: "c", Major: &n, Minor: &n, Access: "rwm"}},
		map[string]specs.LinuxNetDevice(nil), map[string]specs.LinuxNetDevice{"b": {Name: "x"}, "a": {}},
		(*specs.LinuxIntelRdt)(nil), &specs.LinuxIntelRdt{ClosID: "c", Schemata: []string{"s"}})
	for _, v := range values {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := marshalMember(v)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%#v:\nmarshalMember %s, %v\nencoding/json %s", v, got, err, want)
		}
	}
}

// FuzzDecodeMember: whatever decodeMember reads, encoding/json reads the
// same, for each type create reads.
func FuzzDecodeMember(f *testing.F) {
	for _, s := range []string{`[]`, `["a","\u00e9"]`, `{"a":"b"}`, `[{"destination":"/a","type":"bind","source":"/b","options":["ro"],"uidMappings":[{"containerID":0,"hostID":1,"size":2}]}]`,
		`{"createContainer":[{"path":"/h","args":["h"],"env":["A=1"],"timeout":3}],"prestart":[]}`, `{"uid":1,"gid":2,"umask":18,"additionalGids":[3],"username":"u"}`,
		`[{"path":"/dev/x","type":"c","major":195,"minor":0,"fileMode":8630,"uid":0,"gid":0}]`, `[{"allow":false,"access":"rwm"},{"allow":true,"type":"c","major":195,"minor":-1}]`,
		`[{"type":"user","path":"/proc/1/ns/user"}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		check := func(got, want any) {
			if !decodeMember(raw, got) {
				return
			}
			if err := json.Unmarshal(raw, want); err != nil {
				t.Fatalf("decodeMember read %q into %T, which encoding/json refuses: %v", raw, got, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: decodeMember %#v, encoding/json %#v", raw, got, want)
			}
		}
		check(new([]string), new([]string))
		check(new(map[string]string), new(map[string]string))
		check(new([]specs.Mount), new([]specs.Mount))
		check(new(*specs.Hooks), new(*specs.Hooks))
		check(new(specs.User), new(specs.User))
		check(new([]specs.LinuxDevice), new([]specs.LinuxDevice))
		check(new([]specs.LinuxDeviceCgroup), new([]specs.LinuxDeviceCgroup))
		check(new([]specs.LinuxNamespace), new([]specs.LinuxNamespace))
	})
}
