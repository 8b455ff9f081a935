package hook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSetupUserNamespace gives the container uid and gid mappings, as
// podman --uidmap does: what the hook creates in the root (links, the
// cache, and /etc when the image had none) belongs to the host IDs of the
// container's root, and the cache is readable by all, on the merge path
// and on the ldconfig path.
func TestSetupUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chown to the mapped IDs")
	}
	const uid, gid = 100000, 200000
	for _, tc := range []struct {
		name   string
		plant  func(t *testing.T, root string)
		osRoot bool
	}{
		{"merge into the image's cache", func(t *testing.T, root string) { imageCache(t, root) }, false},
		{"merge into the image's cache, without openat2", func(t *testing.T, root string) { imageCache(t, root) }, true},
		{"ldconfig, no /etc in the image", func(t *testing.T, root string) { os.RemoveAll(filepath.Join(root, "etc")) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			tc.plant(t, root)
			cfg, _ := json.Marshal(map[string]any{"root": map[string]any{"path": "rootfs"}, "linux": map[string]any{
				"uidMappings": []map[string]any{{"containerID": 0, "hostID": uid, "size": 65536}},
				"gidMappings": []map[string]any{{"containerID": 0, "hostID": gid, "size": 65536}},
			}})
			os.WriteFile(filepath.Join(b, "config.json"), cfg, 0o644)
			// A link in folders the image lacks: the hook makes them.
			args := append(append([]string{}, setupArgs...), "--library", libDir+"/libcuda.so.1", "--library", libDir+"/libcuda.so",
				"--link", "../../libcuda.so.580.65.06::"+libDir+"/made/deeper/libcuda.so.1")
			if code, stderr := runHookWith(t, tc.osRoot, b, args...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, p := range []string{libDir + "/libcuda.so.1", libDir + "/libcuda.so", "etc/ld.so.cache", libDir + "/made", libDir + "/made/deeper", libDir + "/made/deeper/libcuda.so.1"} {
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(root, p), &st); err != nil {
					t.Fatal(err)
				}
				if st.Uid != uid || st.Gid != gid {
					t.Errorf("/%s is owned by %d:%d, want the container's root %d:%d", strings.TrimPrefix(p, "/"), st.Uid, st.Gid, uid, gid)
				}
				if p == "etc/ld.so.cache" && st.Mode&0o777 != 0o644 {
					t.Errorf("/etc/ld.so.cache has mode %o, want 644", st.Mode&0o777)
				}
			}
			if !strings.HasPrefix(tc.name, "merge into the image's cache") {
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(root, "etc"), &st); err != nil || st.Uid != uid {
					t.Errorf("/etc the hook made is owned by %d (%v), want %d", st.Uid, err, uid)
				}
			}
		})
	}
}

func TestHostRoot(t *testing.T) {
	for _, tc := range []struct {
		m    []idMapping
		want int
	}{
		{nil, 0},
		{[]idMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}, 100000},
		{[]idMapping{{ContainerID: 1, HostID: 100000, Size: 65535}, {ContainerID: 0, HostID: 1000, Size: 1}}, 1000},
		{[]idMapping{{ContainerID: 1, HostID: 100000, Size: 10}}, 0},
		{[]idMapping{{ContainerID: 0, HostID: 5, Size: 0}}, 0},
	} {
		if got := hostRoot(tc.m); got != tc.want {
			t.Errorf("hostRoot(%v) = %d, want %d", tc.m, got, tc.want)
		}
	}
}
