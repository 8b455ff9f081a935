package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestImage builds the image archive as `make image` does and loads it
// the two ways a cluster operator would: `podman load` and containerd's
// `ctr images import`; then runs gpuctk from it with each.
func TestImage(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	tag := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	name := "docker.io/gpuctk/gpuctk:" + tag
	build := func(out string) []byte {
		cmd := exec.Command("go", "run", "./tools/ociimage", "-o", out, "-name", name,
			bin("gpuctk"), bin("gpuctk-hook"), bin("gpuctk-runtime"))
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ociimage: %v\n%s", err, out)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	archive := filepath.Join(t.TempDir(), "gpuctk-image.tar")
	first := build(archive)
	if again := build(filepath.Join(t.TempDir(), "again.tar")); !bytes.Equal(first, again) {
		t.Errorf("two builds from the same binaries differ: the image is not reproducible")
	}
	version := strings.TrimSpace(run(t, bin("gpuctk"), "--version"))

	t.Run("podman", func(t *testing.T) {
		out := run(t, "podman", "load", "-i", archive)
		t.Cleanup(func() { exec.Command("podman", "rmi", "-f", name).Run() })
		if !strings.Contains(out, "Loaded image: "+name) {
			t.Fatalf("podman load names no %s:\n%s", name, out)
		}
		args := append(append([]string{}, podmanArgs...), name, "/usr/bin/gpuctk", "--version")
		if out := strings.TrimSpace(run(t, "podman", args...)); out != version {
			t.Errorf("gpuctk --version in the image: %q, want %q", out, version)
		}
	})

	t.Run("containerd", func(t *testing.T) {
		c := newContainerd(t, `disabled_plugins = ["io.containerd.grpc.v1.cri"]`)
		c.start(t)
		ctr := func(args ...string) string {
			return run(t, tool(t, "ctr"), append([]string{"-a", c.sock, "-n", "gpuctk-e2e"}, args...)...)
		}
		ctr("images", "import", archive)
		if out := ctr("images", "ls", "-q"); !strings.Contains(out, name) {
			t.Fatalf("ctr images ls after import:\n%s\nwant %s", out, name)
		}
		id := "gpuctk-image-" + tag
		if out := strings.TrimSpace(dropWarnings(ctr("run", "--rm", name, id, "/usr/bin/gpuctk", "--version"))); out != version {
			t.Errorf("gpuctk --version in the image under containerd: %q, want %q", out, version)
		}
	})
}
