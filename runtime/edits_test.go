package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// baseConfigs are the configs devices are injected into: testdata's, one
// with a non-root user and a user namespace (uid/gid on nodes, idmap on
// bind mounts), and one that has some of the edits already.
func baseConfigs(t *testing.T) map[string]*specs.Spec {
	t.Helper()
	data, err := os.ReadFile("testdata/config.json")
	if err != nil {
		t.Fatal(err)
	}
	load := func() *specs.Spec {
		var s specs.Spec
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	userns := load()
	userns.Process.User = specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{44}}
	userns.Linux.Namespaces = append(userns.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
	busy := load()
	busy.Process.Env = append(busy.Process.Env, "NVIDIA_VISIBLE_DEVICES=all", "TERM=dumb", "NVIDIA_VISIBLE_DEVICES=0")
	busy.Mounts = append(busy.Mounts,
		specs.Mount{Destination: "/usr/bin/nvidia-smi", Source: "/old", Type: "bind"},
		specs.Mount{Destination: "/a/b/c/d/e/f", Source: "/deep"},
		specs.Mount{Destination: "/usr/bin/nvidia-smi", Source: "/older"})
	busy.Linux.Devices = append(busy.Linux.Devices,
		specs.LinuxDevice{Path: "/dev/nvidia0", Type: "c", Major: 1, Minor: 1},
		specs.LinuxDevice{Path: "/dev/nvidiactl", Type: "c", Major: 1, Minor: 2},
		specs.LinuxDevice{Path: "/dev/nvidia0", Type: "c", Major: 1, Minor: 3})
	busy.Hooks = &specs.Hooks{CreateContainer: []specs.Hook{{Path: "/bin/old"}}}
	return map[string]*specs.Spec{"testdata": load(), "userns": userns, "busy": busy}
}

// TestApplyEditsAsLibrary checks applyEdits against the library's Apply
// on every device of the golden specs (capability devices included),
// through the entries both readers make: the library's (a `gpuctk cdi
// resolve` child) and gpuctkSpec's.
func TestApplyEditsAsLibrary(t *testing.T) {
	goldens, err := filepath.Glob("../cdi/testdata/*.yaml")
	if err != nil || len(goldens) == 0 {
		t.Fatalf("golden specs: %v, %v", goldens, err)
	}
	for _, golden := range goldens {
		t.Run(filepath.Base(golden), func(t *testing.T) {
			dir := t.TempDir()
			data, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			dirs := []string{dir}
			cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			lib, err := libraryResolver(dirs)
			if err != nil {
				t.Fatal(err)
			}
			own, err := GpuctkEntry(dirs)
			if err != nil {
				t.Fatalf("gpuctk's reader refused a golden spec: %v", err)
			}
			devices := cache.ListDevices()
			if len(devices) == 0 {
				t.Fatal("no devices")
			}
			for _, name := range devices {
				for base, cfg := range baseConfigs(t) {
					want := clone(t, cfg)
					if _, err := cache.InjectDevices(want, name); err != nil {
						t.Fatalf("%s: library: %v", name, err)
					}
					for entryName, entry := range map[string][]byte{"library": lib, "gpuctk": own} {
						edits, unknown, _, ok := entryEdits(entry, []string{name})
						if !ok || len(unknown) > 0 {
							t.Fatalf("%s: the %s entry cannot answer (unknown %v)", name, entryName, unknown)
						}
						got := clone(t, cfg)
						if err := applyEdits(got, edits); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						if !reflect.DeepEqual(got, want) {
							g, _ := json.MarshalIndent(got, "", " ")
							w, _ := json.MarshalIndent(want, "", " ")
							t.Fatalf("%s into %s, %s entry: applyEdits gives\n%s\nthe library\n%s", name, base, entryName, g, w)
						}
					}
				}
			}
		})
	}
}

// TestApplyEditsCases covers what the golden specs do not hold: nodes
// read from the host, every hook, intelRdt, net devices, additional GIDs,
// and the errors.
func TestApplyEditsCases(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	mode := os.FileMode(0o600)
	uid := uint32(7)
	timeout := 5
	edits := map[string]cdispec.ContainerEdits{
		"host nodes": {DeviceNodes: []*cdispec.DeviceNode{
			{Path: "/dev/null"},
			{Path: "/dev/zero", HostPath: "/dev/null", Permissions: "rw"},
			{Path: "/dev/full", Type: "c", Permissions: "none"},
			{Path: "/dev/x", Type: "c", Major: 9, Minor: 9, FileMode: &mode, UID: &uid},
			{Path: "/dev/y", HostPath: "/dev/null", Type: "u", Major: 9},
			{Path: "/dev/fifo", HostPath: fifo},
			{Path: "/dev/fifo2", HostPath: fifo, Type: "p"},
			{Path: "/dev/none", Type: "b", Major: 8, Minor: 1},
			{Path: "/dev/null"},
		}},
		"missing node":  {DeviceNodes: []*cdispec.DeviceNode{{Path: filepath.Join(dir, "missing")}}},
		"not a node":    {DeviceNodes: []*cdispec.DeviceNode{{Path: file}}},
		"type mismatch": {DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/null", Type: "b"}}},
		"hooks": {Hooks: []*cdispec.Hook{
			{HookName: "prestart", Path: "/a"}, {HookName: "createRuntime", Path: "/b", Args: []string{"b", "1"}},
			{HookName: "createContainer", Path: "/c", Env: []string{"A=1"}}, {HookName: "startContainer", Path: "/d", Timeout: &timeout},
			{HookName: "poststart", Path: "/e"}, {HookName: "poststop", Path: "/f"},
		}},
		"bad hook": {Hooks: []*cdispec.Hook{{HookName: "createContainer", Path: "/c"}, {HookName: "later", Path: "/x"}}},
		"the rest": {
			Env:            []string{"TERM=vt100", "NEW=1", "NEW=2", "EMPTY="},
			Mounts:         []*cdispec.Mount{{HostPath: "/h", ContainerPath: "/x/y", Type: "bind", Options: []string{"ro"}}, {HostPath: "/r", ContainerPath: "/z", Options: []string{"rbind"}}, {HostPath: "/i", ContainerPath: "/i", Options: []string{"bind", "idmap"}}, {HostPath: "/t", ContainerPath: "/tmpfs", Type: "tmpfs"}},
			NetDevices:     []*cdispec.LinuxNetDevice{{HostInterfaceName: "eth1", Name: "net1"}},
			IntelRdt:       &cdispec.IntelRdt{ClosID: "c", Schemata: []string{"L3:0=1"}, EnableMonitoring: true},
			AdditionalGIDs: []uint32{0, 44, 45, 45},
		},
	}
	for name, e := range edits {
		for base, cfg := range baseConfigs(t) {
			want := clone(t, cfg)
			libEdits := cloneEdits(t, &e)
			wantErr := (&cdi.ContainerEdits{ContainerEdits: libEdits}).Apply(want)
			got := clone(t, cfg)
			gotErr := applyEdits(got, cloneEdits(t, &e))
			if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
				t.Errorf("%s into %s: error %v, the library's %v", name, base, gotErr, wantErr)
				continue
			}
			if wantErr == nil && !reflect.DeepEqual(got, want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(want, "", " ")
				t.Errorf("%s into %s: applyEdits gives\n%s\nthe library\n%s", name, base, g, w)
			}
		}
	}
}

func clone(t *testing.T, s *specs.Spec) *specs.Spec {
	t.Helper()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var c specs.Spec
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func cloneEdits(t *testing.T, e *cdispec.ContainerEdits) *cdispec.ContainerEdits {
	t.Helper()
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var c cdispec.ContainerEdits
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}
