package nvmlhost

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/mig"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// migSpec places one MIG device (a GPU instance with one compute instance)
// in a MIG slot of a mock GPU.
type migSpec struct{ slot, giProfile, ciProfile int }

// dgx returns go-nvml's DGX A100 mock with fixed UUIDs and PCI bus ids (the
// mock draws random UUIDs and leaves the bus id empty), and with MIG
// enabled on the GPUs in mig, which get the MIG devices listed there.
func dgx(t *testing.T, mig map[int][]migSpec) *dgxa100.Server {
	t.Helper()
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.UUID = fmt.Sprintf("GPU-%08x-0000-0000-0000-%012x", i, i)
		busID := fmt.Sprintf("00000000:%02X:00.0", 0x07+8*i)
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			// The DGX A100's A100-SXM4-40GB, as NVML reports its id.
			p := nvml.PciInfo{PciDeviceId: 0x20B010DE}
			for j, c := range busID {
				p.BusId[j] = int8(c)
			}
			return p, nvml.SUCCESS
		}
		// Not attached to an NVLink fabric, as all but GB200-class GPUs.
		dev.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) { return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED }
		// The mock has no topology; the fake library's tests cover it.
		dev.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if specs, ok := mig[i]; ok {
			dev.MigMode = nvml.DEVICE_MIG_ENABLE
			addMIG(t, dev, specs)
		}
	}
	return s
}

// addMIG creates the GPU and compute instances with the mock's own profile
// tables and supplies the MIG handle calls the DGX mock lacks, answering
// what NVML answers for a MIG device: ids, UUID and attributes taken from
// the instance profiles (its engines are its GPU instance's, which its
// compute instances share). Slots not in specs are empty (NOT_FOUND).
func addMIG(t *testing.T, dev *dgxa100.Device, specs []migSpec) {
	t.Helper()
	handles := map[int]nvml.Device{}
	gis := map[int]nvml.GpuInstance{}
	dev.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		if gi, ok := gis[id]; ok {
			return gi, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	for _, s := range specs {
		giProf := dev.Config.MIGProfiles.GpuInstanceProfiles[s.giProfile]
		gi, ret := dev.CreateGpuInstance(&giProf)
		if ret != nvml.SUCCESS {
			t.Fatalf("create GPU instance: %v", ret)
		}
		ciProf, ret := gi.GetComputeInstanceProfileInfo(s.ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			t.Fatalf("compute instance profile %d in GPU instance profile %d: %v", s.ciProfile, s.giProfile, ret)
		}
		ci, ret := gi.CreateComputeInstance(&ciProf)
		if ret != nvml.SUCCESS {
			t.Fatalf("create compute instance: %v", ret)
		}
		giInfo, _ := gi.GetInfo()
		ciInfo, _ := ci.GetInfo()
		gis[int(giInfo.Id)] = gi
		uuid := fmt.Sprintf("MIG-%08x-%04x-0000-0000-%012x", dev.Index, s.slot, giInfo.Id)
		handles[s.slot] = &mock.Device{
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return int(giInfo.Id), nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return int(ciInfo.Id), nvml.SUCCESS },
			GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{
					MultiprocessorCount:       ciProf.MultiprocessorCount,
					SharedCopyEngineCount:     giProf.CopyEngineCount,
					SharedDecoderCount:        giProf.DecoderCount,
					SharedEncoderCount:        giProf.EncoderCount,
					SharedJpegCount:           giProf.JpegCount,
					SharedOfaCount:            giProf.OfaCount,
					GpuInstanceSliceCount:     giProf.SliceCount,
					ComputeInstanceSliceCount: ciProf.SliceCount,
					MemorySizeMB:              giProf.MemorySizeMB,
				}, nvml.SUCCESS
			},
		}
	}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= 7 {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if h, ok := handles[i]; ok {
			return h, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

func TestNVMLHost(t *testing.T) {
	for _, tc := range []struct {
		name string
		lib  func(t *testing.T) nvml.Interface
	}{
		{"dgx-a100", func(t *testing.T) nvml.Interface { return dgx(t, nil) }},
		{"dgx-a100-mig", func(t *testing.T) nvml.Interface {
			return dgx(t, map[int][]migSpec{
				// Seven 1g.5gb instances.
				2: {{0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
					{1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
					{2, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
					{3, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
					{4, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
					{5, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
					{6, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE}},
				// Mixed sizes with empty slots between them, and a
				// compute instance smaller than its GPU instance.
				5: {{0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE},
					{2, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
					{5, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE}},
				// MIG on, no instances yet.
				6: nil,
				7: {{0, nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE}},
			})
		}},
		{"no-mig-support", func(t *testing.T) nvml.Interface {
			s := dgx(t, nil)
			for _, d := range s.Devices {
				d.(*dgxa100.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
			}
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := New(tc.lib(t)).Host()
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(h, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "nvml-"+tc.name+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("host differs from %s (go test -update rewrites it):\n%s", golden, got)
			}
		})
	}
}

// TestNVMLMIGMediaExtensions: a GPU instance made with a media-extension
// profile (nvidia-smi mig -cgi 1g.5gb+me) is a 1g.5gb+me, as nvidia-smi,
// NVIDIA's device plugin (nvidia.com/mig-1g.5gb.me) and mig-parted name
// it, not a 1g.5gb: its attributes (slices, memory) are a 1g.5gb's, and
// only its GPU instance profile tells them apart. Without NVML's leave to
// ask (not root), the name stays the plain one.
func TestNVMLMIGMediaExtensions(t *testing.T) {
	lib := func() *dgxa100.Server {
		s := dgx(t, map[int][]migSpec{0: {
			{0, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
			{1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
		}})
		realProfileIDs(s.Devices[0].(*dgxa100.Device))
		return s
	}
	h, err := New(lib()).Host()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range h.GPUs[0].MIG {
		got = append(got, m.Profile)
	}
	if want := []string{"1g.5gb+me", "1g.5gb"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("MIG profiles of GPU 0 = %q, want %q", got, want)
	}
	if d, err := h.Select("1g.5gb"); err != nil || len(d) != 1 || d[0].MIG.Index != 1 {
		t.Errorf("Select(1g.5gb) = %v, %v; want MIG device 0:1 alone", d, err)
	}

	s := lib()
	s.Devices[0].(*dgxa100.Device).GetGpuInstanceByIdFunc = func(int) (nvml.GpuInstance, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
	h, err = New(s).Host()
	if err != nil || h.GPUs[0].MIG[0].Profile != "1g.5gb" {
		t.Errorf("without permission: %v, %v; want the plain name", h, err)
	}
}

// TestNVMLMIGBlackwellSuffixes: on Blackwell, a GPU instance of NVML's
// ALL_ME, NO_ME and GFX profiles is named with nvidia-smi's "+me.all",
// "-me" and "+gfx" (RTX PRO 6000: 1g.24gb+me.all, 1g.24gb-me,
// 1g.24gb+gfx), where gpuctk gave it the plain profile's name: its
// devices, labels and resources then mixed with the plain profile's. The
// mock is an A100's, whose GPU instance 0 (made as 1g.5gb+me) here claims
// each of those profiles in turn, with the ids an RTX PRO 6000 gives them.
func TestNVMLMIGBlackwellSuffixes(t *testing.T) {
	for _, tc := range []struct {
		profile int
		id      uint32
		want    string
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 65, "1g.5gb+me.all"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 67, "1g.5gb-me"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, 47, "1g.5gb+gfx"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "1g.5gb+me"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s := dgx(t, map[int][]migSpec{0: {
				{0, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
				{1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
			}})
			dev := s.Devices[0].(*dgxa100.Device)
			realProfileIDs(dev)
			blackwell := map[int]bool{}
			for _, p := range profileSuffixes {
				if p.profile != nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1 && p.profile != nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1 {
					blackwell[p.profile] = true
				}
			}
			profileInfo := dev.GetGpuInstanceProfileInfoFunc
			dev.GetGpuInstanceProfileInfoFunc = func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
				switch {
				case p == tc.profile && blackwell[p]:
					return nvml.GpuInstanceProfileInfo{Id: tc.id}, nvml.SUCCESS
				case blackwell[p]:
					return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
				}
				return profileInfo(p)
			}
			byID := dev.GetGpuInstanceByIdFunc
			dev.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
				gi, ret := byID(id)
				if ret != nvml.SUCCESS || id != 0 {
					return gi, ret
				}
				info, ret := gi.GetInfo()
				info.ProfileId = tc.id
				return &mock.GpuInstance{GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) { return info, ret }}, nvml.SUCCESS
			}
			h, err := New(s).Host()
			if err != nil {
				t.Fatal(err)
			}
			if got := []string{h.GPUs[0].MIG[0].Profile, h.GPUs[0].MIG[1].Profile}; got[0] != tc.want || got[1] != "1g.5gb" {
				t.Errorf("MIG profiles of GPU 0 = %q, want %q and 1g.5gb", got, tc.want)
			}
		})
	}
}

// realProfileIDs gives a mock A100 40GB's GPU instance profiles the ids
// NVML gives them (nvidia-smi mig -lgip's ID column), where go-nvml's mock
// uses NVML's profile constants: a GPU instance's info names its profile
// by that id.
func realProfileIDs(dev *dgxa100.Device) {
	ids := map[int]uint32{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE: 19, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
		nvml.GPU_INSTANCE_PROFILE_2_SLICE: 14, nvml.GPU_INSTANCE_PROFILE_3_SLICE: 9, nvml.GPU_INSTANCE_PROFILE_4_SLICE: 5, nvml.GPU_INSTANCE_PROFILE_7_SLICE: 0,
	}
	profileInfo := dev.GetGpuInstanceProfileInfoFunc
	dev.GetGpuInstanceProfileInfoFunc = func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		info, ret := profileInfo(p)
		info.Id = ids[p]
		return info, ret
	}
	byID := dev.GetGpuInstanceByIdFunc
	dev.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		gi, ret := byID(id)
		if ret != nvml.SUCCESS {
			return gi, ret
		}
		info, ret := gi.GetInfo()
		info.ProfileId = ids[int(info.ProfileId)]
		return &mock.GpuInstance{GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) { return info, ret }}, nvml.SUCCESS
	}
}

func TestNVMLErrors(t *testing.T) {
	fail := nvml.ERROR_UNKNOWN
	for _, tc := range []struct {
		name   string
		mutate func(s *dgxa100.Server)
		want   string
		is     error
	}{
		{"init", func(s *dgxa100.Server) {
			s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
		}, "cannot load or initialise NVML: ERROR_LIBRARY_NOT_FOUND: is the NVIDIA driver installed? use --driver-root or --simulate", nvml.ERROR_LIBRARY_NOT_FOUND},
		// After a driver upgrade, before the new kernel module is loaded
		// (the refresh unit runs then, on depmod): no use looking for
		// another driver root.
		{"init after an upgrade", func(s *dgxa100.Server) {
			s.InitFunc = func() nvml.Return { return nvml.ERROR_LIB_RM_VERSION_MISMATCH }
		}, "cannot load or initialise NVML: ERROR_LIB_RM_VERSION_MISMATCH: the loaded NVIDIA kernel module is another version than the driver's libraries (the driver was upgraded or downgraded since it was loaded): reboot, or unload the nvidia modules and load them again", nvml.ERROR_LIB_RM_VERSION_MISMATCH},
		{"driver version", func(s *dgxa100.Server) {
			s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", fail }
		}, "NVML: driver version: ERROR_UNKNOWN", fail},
		{"cuda version", func(s *dgxa100.Server) {
			s.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, fail }
		}, "NVML: CUDA driver version: ERROR_UNKNOWN", fail},
		{"count", func(s *dgxa100.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNINITIALIZED }
		}, "NVML: GPU count: ERROR_UNINITIALIZED", nvml.ERROR_UNINITIALIZED},
		{"handle", func(s *dgxa100.Server) {
			s.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }
		}, "NVML: GPU 0: handle: ERROR_GPU_IS_LOST", nvml.ERROR_GPU_IS_LOST},
		{"memory", func(s *dgxa100.Server) {
			s.Devices[1].(*dgxa100.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, fail }
		}, "NVML: GPU 1: memory info: ERROR_UNKNOWN", fail},
		{"mig mode", func(s *dgxa100.Server) {
			s.Devices[3].(*dgxa100.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, fail }
		}, "NVML: GPU 3: MIG mode: ERROR_UNKNOWN", fail},
		{"mig count", func(s *dgxa100.Server) {
			s.Devices[4].(*dgxa100.Device).GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }
		}, "NVML: GPU 4: MIG device count: ERROR_NO_PERMISSION", nvml.ERROR_NO_PERMISSION},
		{"mig handle", func(s *dgxa100.Server) {
			s.Devices[4].(*dgxa100.Device).GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, fail }
		}, "NVML: GPU 4: MIG device 0: handle: ERROR_UNKNOWN", fail},
		{"mig attributes", func(s *dgxa100.Server) {
			d := s.Devices[4].(*dgxa100.Device)
			h, _ := d.GetMigDeviceHandleByIndex(1)
			h.(*mock.Device).GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) { return nvml.DeviceAttributes{}, nvml.ERROR_NOT_SUPPORTED }
		}, "NVML: GPU 4: MIG device 1: attributes: ERROR_NOT_SUPPORTED", nvml.ERROR_NOT_SUPPORTED},
		{"duplicate uuid", func(s *dgxa100.Server) {
			s.Devices[2].(*dgxa100.Device).UUID = s.Devices[0].(*dgxa100.Device).UUID
		}, "NVML: GPU 2: uuid GPU-00000000-0000-0000-0000-000000000000 used twice", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dgx(t, map[int][]migSpec{4: {
				{0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
				{1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
			}})
			tc.mutate(s)
			h, err := New(s).Host()
			if err == nil {
				t.Fatalf("no error; host %+v", h)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %q\nwant %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.is)
			}
		})
	}
}

func TestOpenNVMLMissing(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	if err == nil || !strings.Contains(err.Error(), "no such file") || !strings.Contains(err.Error(), "--driver-root or --simulate") {
		t.Fatalf("err = %v, want the missing file and what to do", err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("errors.Is(err, os.ErrNotExist) = false")
	}
}

// TestOpenNVMLNotALibrary: a FIFO or a device at the library's path is
// refused before dlopen, which would block on it or read it for ever.
func TestOpenNVMLNotALibrary(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for p, kind := range map[string]string{fifo: "a FIFO", "/dev/zero": "a character device"} {
		if _, err := Open(p); err == nil || err.Error() != "NVML library "+p+" is "+kind+", not a library: reinstall the driver, or name its root with --driver-root" {
			t.Errorf("Open(%s): %v", p, err)
		}
	}
}

func TestMIGProfileName(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		g, c     uint32
		memMiB   uint64
		gpuBytes uint64
		want     string
	}{
		// A100 40GB (40960 MiB): instance memory from the GI profiles.
		{1, 1, 4864, 40 * gib, "1g.5gb"},
		{1, 1, 9856, 40 * gib, "1g.10gb"},
		{2, 2, 9856, 40 * gib, "2g.10gb"},
		{3, 3, 19968, 40 * gib, "3g.20gb"},
		{4, 4, 19968, 40 * gib, "4g.20gb"},
		{7, 7, 40192, 40 * gib, "7g.40gb"},
		{2, 1, 9856, 40 * gib, "1c.2g.10gb"},
		{7, 3, 40192, 40 * gib, "3c.7g.40gb"},
		// H100 80GB HBM3 reports 81559 MiB.
		{1, 1, 9856, 81559 * mib, "1g.10gb"},
		{1, 1, 19968, 81559 * mib, "1g.20gb"},
		{3, 3, 40192, 81559 * mib, "3g.40gb"},
		{7, 7, 80384, 81559 * mib, "7g.80gb"},
		// H100 NVL 94GB reports 95830 MiB.
		{1, 1, 11008, 95830 * mib, "1g.12gb"},
		{7, 7, 95232, 95830 * mib, "7g.94gb"},
	} {
		attr := nvml.DeviceAttributes{GpuInstanceSliceCount: tc.g, ComputeInstanceSliceCount: tc.c, MemorySizeMB: tc.memMiB}
		if got := migProfile(attr, tc.gpuBytes); got != tc.want {
			t.Errorf("migProfile(%dg %dc %d MiB of %d MiB) = %s, want %s", tc.g, tc.c, tc.memMiB, tc.gpuBytes/mib, got, tc.want)
		}
	}
}

// TestFabricClique: a GPU whose fabric registration completed has the
// clique GPU feature discovery labels, "<cluster UUID>.<clique ID>"; one
// still registering, or failed, has none.
func TestFabricClique(t *testing.T) {
	s := dgx(t, nil)
	uuid := [16]uint8{0x7b, 0x96, 0x8a, 0x6d, 0xc8, 0xaa, 0x45, 0xe1, 0x9e, 0x07, 0xe1, 0xe5, 0x1b, 0xe9, 0x9c, 0x31}
	for i, d := range s.Devices {
		state := uint8(nvml.GPU_FABRIC_STATE_COMPLETED)
		if i == 1 {
			state = nvml.GPU_FABRIC_STATE_IN_PROGRESS
		}
		d.(*dgxa100.Device).GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
			return nvml.GpuFabricInfo{ClusterUuid: uuid, CliqueId: 1, State: state, Status: uint32(nvml.SUCCESS)}, nvml.SUCCESS
		}
	}
	h, err := New(s).Host()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.GPUs[0].Clique, "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"; got != want {
		t.Errorf("GPU 0 clique %q, want %q", got, want)
	}
	if got := h.GPUs[1].Clique; got != "" {
		t.Errorf("GPU 1, still registering: clique %q, want none", got)
	}
}

// TestModelWithoutNames reads the MIG profiles of go-nvml's DGX A100 mock,
// which (like drivers before R470) has no profile names to give: gpuctk
// names them as nvidia-smi does, from slices, memory share and NVML's
// profile constant (+me), and they are the A100 40GB model data's.
func TestModelWithoutNames(t *testing.T) {
	s := dgx(t, nil)
	m, err := New(s).MIG()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h, err := New(dgx(t, nil)).Host()
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Model(&h.GPUs[0])
	if err != nil {
		t.Fatal(err)
	}
	want, _ := mig.ModelOf(&inventory.GPU{Name: "NVIDIA A100-SXM4-40GB"})
	if got.ProfileNames() != want.ProfileNames() || got.MemorySlices != 8 || got.ComputeSlices != 7 {
		t.Errorf("profiles %s (%d/%d slices), want %s", got.ProfileNames(), got.ComputeSlices, got.MemorySlices, want.ProfileNames())
	}
}

// TestComputeProfileWithoutNames reads the compute instance profile that
// spans GPU instances of go-nvml's DGX A100 mock, which (like drivers
// before the V call) answers the unversioned call only: the profile of as
// many slices, with the GPU instance's SMs and engines, and no name.
func TestComputeProfileWithoutNames(t *testing.T) {
	specs := map[int][]migSpec{}
	for i, p := range []int{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE,
		nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GPU_INSTANCE_PROFILE_7_SLICE} {
		specs[i] = []migSpec{{slot: 0, giProfile: p, ciProfile: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE}}
	}
	s := dgx(t, specs)
	m, err := New(s).MIG()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, want := range []ComputeProfile{
		{ID: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, Slices: 1, SMCount: 14, Engines: inventory.Engines{Copy: 1}},
		{ID: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, Slices: 2, SMCount: 28, Engines: inventory.Engines{Copy: 2, Decoder: 1}},
		{ID: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, Slices: 3, SMCount: 42, Engines: inventory.Engines{Copy: 3, Decoder: 2}},
		{ID: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, Slices: 4, SMCount: 56, Engines: inventory.Engines{Copy: 4, Decoder: 2}},
		{ID: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, Slices: 7, SMCount: 98, Engines: inventory.Engines{Copy: 7, Decoder: 5, JPEG: 1, OFA: 1}},
	} {
		dev := s.Devices[i].(*dgxa100.Device)
		gi, _ := dev.GetGpuInstanceById(0)
		info, _ := gi.GetInfo()
		got, err := m.ComputeProfile(dev.UUID, int(info.Id))
		if err != nil {
			t.Fatalf("GPU %d: %v", i, err)
		}
		if *got != want {
			t.Errorf("GPU %d: compute instance profile %+v, want %+v", i, *got, want)
		}
	}
}
