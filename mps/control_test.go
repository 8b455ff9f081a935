package mps

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// dgxDevices resolves sharing entries on the dgx-a100 profile and returns
// the MPS-shared devices, their folders under stateRoot.
func dgxDevices(t *testing.T, stateRoot string, sharing ...config.Sharing) []*offer.Share {
	t.Helper()
	set, err := offer.Resolve(fakehost.Host(t, "dgx-a100"), &config.Config{Sharing: sharing, MPS: config.MPSConfig{StateRoot: stateRoot}})
	if err != nil {
		t.Fatal(err)
	}
	return set.MPS()
}

// fakeDriverRoot returns a driver root holding an executable
// usr/bin/nvidia-cuda-mps-control.
func fakeDriverRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(root, "usr/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, controlName), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestFindControl(t *testing.T) {
	empty := t.TempDir()
	_, err := FindControl(empty)
	want := "driver root " + empty + ": nvidia-cuda-mps-control is not in /usr/bin, /usr/sbin, /bin, /sbin, /usr/local/bin, /usr/local/nvidia/bin: install the driver's MPS binaries or pass the right --driver-root"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	// Not executable is not there.
	os.MkdirAll(filepath.Join(empty, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(empty, "usr/bin", controlName), nil, 0o644)
	if _, err := FindControl(empty); err == nil {
		t.Fatal("a file without exec permission passed")
	}
	// The other folders count.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/local/nvidia/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/local/nvidia/bin", controlName), nil, 0o755)
	if p, err := FindControl(root); err != nil || p != filepath.Join(root, "usr/local/nvidia/bin", controlName) {
		t.Fatalf("FindControl = %s, %v", p, err)
	}
}
