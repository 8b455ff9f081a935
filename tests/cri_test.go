package tests

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ociArchive packs rootfs as a one-layer OCI image named name, in an OCI
// layout tar that `ctr images import` reads: no registry involved.
func ociArchive(t *testing.T, rootfs, name string, cmd []string) string {
	t.Helper()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	err := filepath.WalkDir(rootfs, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == rootfs {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rootfs, path)
		hdr.Name = rel
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}

	blobs := map[string][]byte{}
	desc := func(mediaType string, data []byte) map[string]any {
		sum := sha256.Sum256(data)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = data
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(data)}
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	layerDesc := desc("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config := desc("application/vnd.oci.image.config.v1+json", mustJSON(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Cmd": cmd, "Env": []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc["digest"].(string)}},
	}))
	manifest := desc("application/vnd.oci.image.manifest.v1+json", mustJSON(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": config, "layers": []any{layerDesc},
	}))
	manifest["annotations"] = map[string]string{"io.containerd.image.name": name}
	manifest["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	index := mustJSON(map[string]any{"schemaVersion": 2, "manifests": []any{manifest}})

	out := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	aw := tar.NewWriter(f)
	add := func(name string, data []byte) {
		if err := aw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := aw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	add("index.json", index)
	for d, data := range blobs {
		add("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), data)
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCRIRuntimeClass runs a pod through containerd's CRI, as the kubelet
// does, with runtime handler "nvidia" from `gpuctk runtime configure` and
// a container asking for mig-0 the way NVIDIA's device plugin does, by
// NVIDIA_VISIBLE_DEVICES. The images come from a local OCI layout, the
// sandbox uses the host's network: no registry, no CNI.
func TestCRIRuntimeClass(t *testing.T) {
	h := newRuntimeHost(t, "")
	const image = "gpuctk.test/busybox:1"
	c := newContainerd(t, "\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = '"+image+"'\n"+
		// This machine denies lowering oom_score_adj, as CRI does for sandboxes.
		"[plugins.'io.containerd.cri.v1.runtime']\n  restrict_oom_score_adj = true\n")
	c.start(t, "GPUCTK_CONFIG="+h.config)
	archive := ociArchive(t, h.rootfs, image, []string{"/bin/sleep", "3600"})
	if out, err := exec.Command(tool(t, "ctr"), "-a", c.sock, "-n", "k8s.io", "images", "import", archive).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	cri := func(flags ...string) (string, error) {
		args := append([]string{"-socket", c.sock, "-handler", "nvidia", "-image", image, "-log-dir", t.TempDir()}, flags...)
		args = append(args, "--", "/bin/sh", "-c", inspect)
		out, err := exec.Command(tool(t, "criclient"), args...).CombinedOutput()
		return string(out), err
	}
	out, err := cri("-env", "NVIDIA_VISIBLE_DEVICES=mig-0")
	if err != nil {
		t.Fatalf("pod with runtime handler nvidia: %v\n%s", err, out)
	}
	checkInside(t, out, mig0Nodes)
	if log, _ := os.ReadFile(h.log); !strings.Contains(string(log), "injected "+h.vendor+"/gpu=mig-0 (from NVIDIA_VISIBLE_DEVICES)") {
		t.Errorf("gpuctk-runtime's log:\n%s", log)
	}

	// A device plugin's CDI annotation: containerd 2.x injects the device
	// itself, and the runtime, seeing NVIDIA_VISIBLE_DEVICES=void from the
	// spec, does not inject it again.
	os.Truncate(h.log, 0)
	out, err = cri("-annotation", "cdi.k8s.io/gpuctk-plugin_mig-0="+h.vendor+"/gpu=mig-0")
	if err != nil {
		t.Fatalf("pod with a CDI annotation: %v\n%s", err, out)
	}
	checkInside(t, out, mig0Nodes)
	if log, _ := os.ReadFile(h.log); strings.Contains(string(log), "injected") {
		t.Errorf("the runtime injected devices containerd had injected:\n%s", log)
	}

	out, err = cri("-env", "NVIDIA_VISIBLE_DEVICES=mig-99")
	if want := "unknown device " + h.vendor + "/gpu=mig-99"; err == nil || !strings.Contains(out, want) {
		t.Errorf("pod asking for an unknown device: %v\n%s\nwant the runtime's error %q", err, out, want)
	}
}
