package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestNVMLLibraries: the driver's libnvidia-ml.so.1, which gpuctk and the
// device plugin dlopen from the host's driver root, needs libpthread.so.0,
// libdl.so.2 and libm.so.6 beside libc.so.6. A Go binary built against
// glibc 2.34 or later needs only libc.so.6, so ldd names only that: an
// image holding just what ldd lists cannot load NVML ("cannot load or
// initialise NVML (/driver-root/...): ERROR_LIBRARY_NOT_FOUND").
func TestNVMLLibraries(t *testing.T) {
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no dynamic binary to try: ", err)
	}
	libs, err := libraries(bin)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(libs, func(l string) bool { return filepath.Base(l) == "libc.so.6" })
	if i < 0 {
		t.Skipf("%s does not link glibc: %q", bin, libs)
	}
	for _, want := range []string{"libpthread.so.0", "libdl.so.2", "libm.so.6", "librt.so.1"} {
		if p := filepath.Join(filepath.Dir(libs[i]), want); !slices.Contains(libs, p) {
			t.Errorf("the image of %s lacks %s: %q", bin, p, libs)
		}
	}
}
