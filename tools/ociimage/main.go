// Command ociimage writes an OCI image archive (an OCI layout in a tar, as
// `podman load` and `ctr images import` read it) holding the given
// binaries in /usr/bin, with no registry and no container daemon. `make
// image` runs it.
//
// gpuctk and the device plugin are cgo binaries: they load NVML with
// dlopen, which a static glibc binary cannot do reliably (the driver's
// libnvidia-ml.so needs the dynamic loader and a libc of the same build).
// So each dynamic binary's loader and libraries, as ldd lists them, go into
// the image at the paths ldd gives, with the glibc libraries the driver's
// libnvidia-ml.so.1 needs beside libc (libpthread, libdl, libm, librt);
// static binaries need nothing more.
//
// The archive is reproducible: entries are sorted, owned by root, and
// dated SOURCE_DATE_EPOCH (0 when unset), and the layer is gzipped with no
// name or time, so the same binaries give the same bytes.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
)

func main() {
	out := flag.String("o", "dist/gpuctk-image.tar", "the archive to write")
	name := flag.String("name", "docker.io/gpuctk/gpuctk:latest", "the image's name, as a full reference (registry/repository:tag)")
	arch := flag.String("arch", "amd64", "the image's architecture (GOARCH names)")
	cmd := flag.String("cmd", "/usr/bin/gpuctk-device-plugin", "the command the image runs when none is given")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: ociimage [flags] BINARY...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, *name, *arch, *cmd, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

var reference = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func run(out, name, arch, cmd string, bins []string) error {
	if len(bins) == 0 {
		return fmt.Errorf("no binaries given: name the binaries to put in /usr/bin")
	}
	if !reference.MatchString(name) {
		return fmt.Errorf("-name %q is not a full image reference such as docker.io/gpuctk/gpuctk:1.2.0 (a tag takes letters, digits, '_', '.' and '-')", name)
	}
	epoch := int64(0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var err error
		if epoch, err = strconv.ParseInt(s, 10, 64); err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds", s)
		}
	}
	files := map[string]string{} // path in the image -> file on this host
	for _, b := range bins {
		files["usr/bin/"+filepath.Base(b)] = b
		libs, err := libraries(b)
		if err != nil {
			return err
		}
		for _, l := range libs {
			files[strings.TrimPrefix(l, "/")] = l
		}
	}
	layer, err := buildLayer(files, time.Unix(epoch, 0).UTC())
	if err != nil {
		return err
	}
	archive, err := buildArchive(layer, name, arch, cmd, time.Unix(epoch, 0).UTC())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(out, archive, 0o644)
}

// libraries lists the dynamic loader and shared libraries a binary needs,
// none for a static one.
func libraries(bin string) ([]string, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, err
	}
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		// ldd fails for static binaries, saying so.
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", bin, err, strings.TrimSpace(string(out)))
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0]) // the loader
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd %s: %s is not found on this host", bin, f[0])
		}
	}
	// The libraries the binary dlopens from the host's driver root need
	// glibc's other libraries, which a binary built against glibc 2.34 or
	// later does not: the image has them beside its libc, of the same glibc.
	for _, l := range libs {
		if filepath.Base(l) != "libc.so.6" {
			continue
		}
		for _, name := range driverNeeds {
			p := filepath.Join(filepath.Dir(l), name)
			if _, err := os.Stat(p); err == nil && !slices.Contains(libs, p) {
				libs = append(libs, p)
			}
		}
		break
	}
	return libs, nil
}

// driverNeeds are the glibc libraries the driver's libraries
// (libnvidia-ml.so.1, which gpuctk and the device plugin dlopen) are
// linked against besides libc.so.6.
var driverNeeds = []string{"libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1"}

// buildLayer tars files (and their parent folders) in name order, the
// content read through symlinks, every entry dated mtime and owned by root.
func buildLayer(files map[string]string, mtime time.Time) ([]byte, error) {
	entries := map[string]string{"tmp/": ""}
	for p, src := range files {
		entries[p] = src
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			entries[d+"/"] = ""
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		hdr := &tar.Header{Name: n, ModTime: mtime, Format: tar.FormatPAX, Typeflag: tar.TypeDir, Mode: 0o755}
		if n == "tmp/" {
			hdr.Mode = 0o1777
		}
		var data []byte
		if src := entries[n]; src != "" {
			var err error
			if data, err = os.ReadFile(src); err != nil {
				return nil, err
			}
			fi, err := os.Stat(src)
			if err != nil {
				return nil, err
			}
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, int64(fi.Mode().Perm()), int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// buildArchive writes the OCI layout: oci-layout, index.json (one
// manifest per platform; one today), and the blobs.
func buildArchive(layer []byte, name, arch, cmd string, created time.Time) ([]byte, error) {
	blobs := map[string][]byte{}
	add := func(mediaType string, data []byte) descriptor {
		sum := sha256.Sum256(data)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = data
		return descriptor{MediaType: mediaType, Digest: d, Size: len(data)}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(layer); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	diffID := sha256.Sum256(layer)
	layerDesc := add("application/vnd.oci.image.layer.v1.tar+gzip", gz.Bytes())
	config, err := json.Marshal(map[string]any{
		"created":      created.Format(time.RFC3339),
		"architecture": arch,
		"os":           "linux",
		"config": map[string]any{
			// Cmd, not Entrypoint: `podman run IMAGE /usr/bin/gpuctk
			// --version` then runs gpuctk, and the DaemonSet names its
			// command anyway.
			"Cmd": []string{cmd},
			"Env": []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return nil, err
	}
	configDesc := add("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return nil, err
	}
	m := add("application/vnd.oci.image.manifest.v1+json", manifest)
	// containerd names the image from the first annotation, podman and
	// skopeo from the second.
	m.Annotations = map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name}
	m.Platform = &platform{Architecture: arch, OS: "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{m},
	})
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write := func(name string, data []byte, typ byte) error {
		hdr := &tar.Header{Name: name, Typeflag: typ, Mode: 0o644, Size: int64(len(data)), ModTime: created, Format: tar.FormatPAX}
		if typ == tar.TypeDir {
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	slices.Sort(digests)
	if err := write("blobs/", nil, tar.TypeDir); err != nil {
		return nil, err
	}
	if err := write("blobs/sha256/", nil, tar.TypeDir); err != nil {
		return nil, err
	}
	for _, d := range digests {
		if err := write("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), blobs[d], tar.TypeReg); err != nil {
			return nil, err
		}
	}
	if err := write("index.json", index, tar.TypeReg); err != nil {
		return nil, err
	}
	if err := write("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`), tar.TypeReg); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
