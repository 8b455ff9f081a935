package fakenvml_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
	"github.com/gpuctk/gpuctk/tests/fakehost"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
)

// lib is the fake library, built once: a process can bind go-nvml's calls
// to only one libnvidia-ml, so every test loads this copy and switches
// hosts through the environment variable.
var lib string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakenvml-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lib = filepath.Join(dir, fakenvml.SONAME)
	if err := fakenvml.Build(lib); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// useHost points the library at a description of h with the faults.
func useHost(t *testing.T, h *inventory.Host, faults ...fakenvml.Fault) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "host")
	if err := fakenvml.WriteFile(path, h, faults...); err != nil {
		t.Fatal(err)
	}
	t.Setenv(fakenvml.EnvVar, path)
}

// TestProfilesThroughNVML reads every embedded profile back through the
// production path: go-nvml dlopens the library, resolves the versioned
// symbols and the NVML source builds the host.
func TestProfilesThroughNVML(t *testing.T) {
	for _, name := range inventory.Profiles() {
		t.Run(name, func(t *testing.T) {
			want := fakehost.Host(t, name)
			useHost(t, want)
			src, err := nvmlhost.Open(lib)
			if err != nil {
				t.Fatal(err)
			}
			got, err := src.Host()
			if err != nil {
				t.Fatal(err)
			}
			g, _ := json.MarshalIndent(got, "", "  ")
			w, _ := json.MarshalIndent(want, "", "  ")
			if string(g) != string(w) {
				t.Errorf("NVML host differs from --simulate %s:\n got %s\nwant %s", name, g, w)
			}
		})
	}
}

func TestNVMLErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), fakenvml.SONAME)
	notELF := filepath.Join(t.TempDir(), fakenvml.SONAME)
	if err := os.WriteFile(notELF, []byte("not a shared object\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		profile string
		faults  []fakenvml.Fault
		noHost  bool   // leave the environment variable unset
		lib     string // a library other than the fake
		want    string
		is      error
	}{
		{name: "init fails", profile: "l40s",
			faults: []fakenvml.Fault{{"nvmlInit_v2", -1, nvml.ERROR_UNKNOWN}},
			want:   "cannot load or initialise NVML (" + lib + "): Unknown Error: is the NVIDIA driver installed? use --driver-root or --simulate",
			is:     nvml.ERROR_UNKNOWN},
		{name: "no driver", noHost: true,
			want: "cannot load or initialise NVML (" + lib + "): Driver Not Loaded: is the NVIDIA driver installed? use --driver-root or --simulate",
			is:   nvml.ERROR_DRIVER_NOT_LOADED},
		{name: "library missing", lib: missing,
			want: "NVML library: stat " + missing + ": no such file or directory: is the NVIDIA driver installed? use --driver-root or --simulate",
			is:   os.ErrNotExist},
		{name: "library not loadable", lib: notELF,
			// The code's text comes from whichever libnvidia-ml go-nvml
			// last loaded, so it is filled in when the error is made.
			want: "cannot load or initialise NVML (" + notELF + "): %v: is the NVIDIA driver installed? use --driver-root or --simulate",
			is:   nvml.ERROR_LIBRARY_NOT_FOUND},
		{name: "MIG mode query fails", profile: "dgx-a100",
			faults: []fakenvml.Fault{{"nvmlDeviceGetMigMode", 6, nvml.ERROR_UNKNOWN}},
			want:   "NVML: GPU 6: MIG mode: Unknown Error", is: nvml.ERROR_UNKNOWN},
		{name: "MIG handle query fails", profile: "h100",
			faults: []fakenvml.Fault{{"nvmlDeviceGetMigDeviceHandleByIndex", 0, nvml.ERROR_GPU_IS_LOST}},
			want:   "NVML: GPU 0: MIG device 0: handle: GPU is lost", is: nvml.ERROR_GPU_IS_LOST},
		{name: "MIG attributes fail", profile: "dgx-h100-mig",
			faults: []fakenvml.Fault{{"nvmlDeviceGetAttributes_v2", 3, nvml.ERROR_NO_PERMISSION}},
			want:   "NVML: GPU 3: MIG device 0: attributes: Insufficient Permissions", is: nvml.ERROR_NO_PERMISSION},
		{name: "PCI info fails", profile: "p100",
			faults: []fakenvml.Fault{{"nvmlDeviceGetPciInfo_v3", 1, nvml.ERROR_UNKNOWN}},
			want:   "NVML: GPU 1: PCI info: Unknown Error", is: nvml.ERROR_UNKNOWN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := lib
			if tc.lib != "" {
				path = tc.lib
			}
			switch {
			case tc.noHost:
				t.Setenv(fakenvml.EnvVar, "")
			case tc.profile != "":
				useHost(t, fakehost.Host(t, tc.profile), tc.faults...)
			}
			src, err := nvmlhost.Open(path)
			if err == nil {
				var h *inventory.Host
				if h, err = src.Host(); err == nil {
					t.Fatalf("no error; host has %d GPUs", len(h.GPUs))
				}
			}
			want := tc.want
			if strings.Contains(want, "%v") {
				want = fmt.Sprintf(want, tc.is)
			}
			if err.Error() != want {
				t.Errorf("error\n got %q\nwant %q", err, want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(err, %v) = false", tc.is)
			}
		})
	}
}

// TestReturnCodes checks the codes the library gives where NVML's
// reference specifies them, through go-nvml's own calls.
func TestReturnCodes(t *testing.T) {
	useHost(t, fakehost.Host(t, "dgx-a100"))
	l := nvml.New(nvml.WithLibraryPath(lib))
	if ret := l.Init(); ret != nvml.SUCCESS {
		t.Fatalf("init: %v", ret)
	}
	gpu0, ret := l.DeviceGetHandleByIndex(0) // MIG capable, MIG off
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	gpu7, _ := l.DeviceGetHandleByIndex(7) // MIG on, 4 instances
	mig, ret := gpu7.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	check := func(what string, got, want nvml.Return) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d (%v), want %d", what, int(got), got, int(want))
		}
	}
	_, ret = l.DeviceGetHandleByIndex(8)
	check("handle of GPU 8 of 8", ret, nvml.ERROR_INVALID_ARGUMENT)
	mode, _, ret := gpu0.GetMigMode()
	check("MIG mode of GPU 0", ret, nvml.SUCCESS)
	if mode != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("GPU 0 MIG mode = %d, want disabled", mode)
	}
	_, ret = gpu0.GetMigDeviceHandleByIndex(0)
	check("MIG handle on a GPU with MIG off", ret, nvml.ERROR_NOT_FOUND)
	_, ret = gpu7.GetMigDeviceHandleByIndex(4)
	check("empty MIG slot", ret, nvml.ERROR_NOT_FOUND)
	_, ret = gpu7.GetMigDeviceHandleByIndex(7)
	check("MIG slot past the last", ret, nvml.ERROR_INVALID_ARGUMENT)
	_, ret = gpu0.GetGpuInstanceId()
	check("GPU instance id of a full GPU", ret, nvml.ERROR_NOT_SUPPORTED)
	isMig, ret := mig.IsMigDeviceHandle()
	check("is MIG handle", ret, nvml.SUCCESS)
	if !isMig {
		t.Error("MIG handle is not a MIG handle")
	}
	parent, ret := mig.GetDeviceHandleFromMigDeviceHandle()
	check("parent of MIG handle", ret, nvml.SUCCESS)
	if uuid, _ := parent.GetUUID(); uuid != "GPU-6031c12e-e245-fc45-1cf6-d8e948ef41fa" {
		t.Errorf("parent uuid = %s", uuid)
	}
	pci, _ := gpu7.GetPciInfo()
	if pci.Domain != 0 || pci.Bus != 0xBD || pci.Device != 0 {
		t.Errorf("PCI info = %+v, want bus 0xbd", pci)
	}
	check("shutdown", l.Shutdown(), nvml.SUCCESS)

	// Without nvmlInit every call is refused, as NVML does.
	_, ret = gpu0.GetUUID()
	check("uuid after shutdown", ret, nvml.ERROR_UNINITIALIZED)
	_, ret = l.SystemGetDriverVersion()
	check("driver version after shutdown", ret, nvml.ERROR_UNINITIALIZED)
	check("second shutdown", l.Shutdown(), nvml.ERROR_UNINITIALIZED)
}

// TestL40SNotSupported checks that a GPU without MIG answers NOT_SUPPORTED
// to MIG queries, which the NVML source reads as MIG disabled.
func TestL40SNotSupported(t *testing.T) {
	useHost(t, fakehost.Host(t, "l40s"))
	l := nvml.New(nvml.WithLibraryPath(lib))
	if ret := l.Init(); ret != nvml.SUCCESS {
		t.Fatalf("init: %v", ret)
	}
	defer l.Shutdown()
	d, _ := l.DeviceGetHandleByIndex(0)
	if _, _, ret := d.GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("MIG mode of an L40S: %v, want NOT_SUPPORTED", ret)
	}
	if _, ret := d.GetMaxMigDeviceCount(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("MIG device count of an L40S: %v, want NOT_SUPPORTED", ret)
	}
}

func TestWriteErrors(t *testing.T) {
	h := fakehost.Host(t, "h100")
	h.GPUs[0].MIG[2].Profile = "large"
	err := fakenvml.Write(&strings.Builder{}, h)
	if err == nil || !strings.Contains(err.Error(), `GPU 0 MIG device 2: MIG profile "large"`) {
		t.Errorf("err = %v", err)
	}
}
