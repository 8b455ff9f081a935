// Package fakenvml builds and feeds a test double of the driver's
// libnvidia-ml.so.1, so that the NVML code that runs on real hosts (go-nvml
// loading a shared library, versioned symbols, real return codes, MIG
// handles) runs on machines without a GPU.
//
// The library is C (src/libnvidia-ml.c), compiled with gcc by Build and
// depending on libc only. It describes the host written by WriteFile into
// the file that the environment variable EnvVar names, read at every first
// nvmlInit; Faults make chosen NVML calls fail. Tests describe hosts with
// the same inventory.Host values the simulated profiles produce, so the
// NVML source can be checked against --simulate.
package fakenvml

import (
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/mig"
)

// EnvVar names the file the library reads the host from. MIG changes made
// through the library rewrite that file.
const EnvVar = "GPUCTK_FAKE_NVML_HOST"

// SONAME is the library's soname, the driver's.
const SONAME = "libnvidia-ml.so.1"

//go:embed src/libnvidia-ml.c
var source []byte

// Build compiles the library into out (any file name; callers install it
// as libnvidia-ml.so.<driver version> or libnvidia-ml.so.1).
func Build(out string) error {
	dir, err := os.MkdirTemp("", "fakenvml-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "libnvidia-ml.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return err
	}
	cmd := exec.Command("gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
		"-shared", "-fPIC", "-fvisibility=hidden",
		"-Wl,-soname,"+SONAME, "-Wl,-z,nodelete", "-Wl,--no-undefined",
		"-o", out, src, "-lpthread")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build fake %s: %w\n%s", SONAME, err, output)
	}
	return nil
}

// Fault makes an NVML call fail.
type Fault struct {
	// Function is the exported symbol, for example "nvmlInit_v2" or
	// "nvmlDeviceGetMigMode".
	Function string
	// GPU limits the fault to calls on the GPU with this index and on its
	// MIG devices; -1 makes every call fail.
	GPU int
	// Return is the code the call returns.
	Return nvml.Return
}

// WriteFile writes the description of h (and the faults) to path, for the
// library to read when EnvVar names path.
func WriteFile(path string, h *inventory.Host, faults ...Fault) error {
	var b strings.Builder
	if err := Write(&b, h, faults...); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(b.String()), 0o644)
}

// Write writes the description of h and the faults in the library's line
// format (documented in src/libnvidia-ml.c).
func Write(w io.Writer, h *inventory.Host, faults ...Fault) error {
	var cudaMajor, cudaMinor int
	if _, err := fmt.Sscanf(h.CUDAVersion, "%d.%d", &cudaMajor, &cudaMinor); err != nil {
		return fmt.Errorf("CUDA version %q: want MAJOR.MINOR", h.CUDAVersion)
	}
	fmt.Fprintf(w, "# host for the fake %s (gpuctk tests)\n", SONAME)
	fmt.Fprintf(w, "driver %s\n", h.DriverVersion)
	fmt.Fprintf(w, "cuda %d\n", cudaMajor*1000+cudaMinor*10)
	for _, g := range h.GPUs {
		var ccMajor, ccMinor int
		if _, err := fmt.Sscanf(g.ComputeCapability, "%d.%d", &ccMajor, &ccMinor); err != nil {
			return fmt.Errorf("GPU %d: compute capability %q: want MAJOR.MINOR", g.Index, g.ComputeCapability)
		}
		mode := "unsupported"
		switch {
		case g.MIGEnabled:
			mode = "on"
		case MIGCapable(g.Name):
			mode = "off"
		}
		for _, s := range []string{g.UUID, g.PCIBusID} {
			if s == "" || strings.ContainsAny(s, " \t\n") {
				return fmt.Errorf("GPU %d: %q is empty or holds spaces", g.Index, s)
			}
		}
		fmt.Fprintf(w, "gpu %d %d %s %d %d %d %s %s %s\n", g.Index, g.Minor, mode, g.MemoryMiB,
			ccMajor, ccMinor, g.UUID, g.PCIBusID, g.Name)
		if g.PCIDeviceID != 0 {
			fmt.Fprintf(w, "pci 0x%08X\n", g.PCIDeviceID)
		}
		// The GPU instance profiles of gpuctk's model data, which the
		// library reports as NVML does (names, placements, instance
		// counts), so that the NVML path plans and applies on them.
		if model, ok := mig.ModelOf(&g); ok && mode != "unsupported" {
			for _, p := range model.Profiles {
				var starts []string
				for _, s := range p.Starts {
					starts = append(starts, fmt.Sprint(s))
				}
				fmt.Fprintf(w, "profile %d %d %d %d %d %s %s %d %s\n", p.ID, p.ComputeSlices, p.MemorySlices, p.MemoryMiB, p.SMCount,
					strings.Join(starts, ","), engines(p.Engines), p.Instances, p.Name)
			}
		}
		if len(g.Distance) > 0 {
			fmt.Fprintf(w, "topo %s\n", strings.Trim(fmt.Sprint(g.Distance), "[]"))
		}
		if g.NUMANode != nil {
			fmt.Fprintf(w, "numa %d\n", *g.NUMANode)
		}
		for _, m := range g.MIG {
			gSlices, cSlices, err := slices(m.Profile)
			if err != nil {
				return fmt.Errorf("GPU %d MIG device %d: %w", g.Index, m.Index, err)
			}
			fmt.Fprintf(w, "mig %d %d %d %d %d %d %d %s %s\n", m.Index, m.GI, m.CI, gSlices, cSlices,
				m.MemoryMiB, m.SMCount, m.UUID, engines(m.Engines))
		}
	}
	for _, f := range faults {
		gpu := "-"
		if f.GPU >= 0 {
			gpu = fmt.Sprint(f.GPU)
		}
		fmt.Fprintf(w, "fail %s %s %d\n", f.Function, gpu, int(f.Return))
	}
	return nil
}

// engines are a line's engine counts in the library's order: copy
// engines, decoders, encoders, JPEG decoders, optical flow accelerators.
func engines(e inventory.Engines) string {
	return fmt.Sprintf("%d %d %d %d %d", e.Copy, e.Decoder, e.Encoder, e.JPEG, e.OFA)
}

// slices returns the GPU and compute instance slice counts a MIG profile
// name states: "2g.10gb" is 2 and 2, "1c.2g.10gb" is 2 and 1.
func slices(profile string) (g, c int, err error) {
	name, _, _ := strings.Cut(profile, "+") // "+me" and other attributes
	if _, err := fmt.Sscanf(name, "%dc.%dg.", &c, &g); err == nil {
		return g, c, nil
	}
	if _, err := fmt.Sscanf(name, "%dg.", &g); err == nil {
		return g, g, nil
	}
	return 0, 0, fmt.Errorf("MIG profile %q: want Gg.Ngb or Cc.Gg.Ngb", profile)
}

// MIGCapable reports whether a GPU model supports MIG (so NVML answers
// "disabled" rather than "not supported" when MIG is off): the data-centre
// parts from Ampere on.
func MIGCapable(name string) bool {
	for _, model := range []string{"A100", "A800", "A30", "H100", "H800", "H200", "H20", "GH200", "B100", "B200", "GB200", "B300"} {
		for _, f := range strings.Fields(name) {
			if f == model || strings.HasPrefix(f, model+"-") {
				return true
			}
		}
	}
	return false
}

// EventsFile is the file the library reads events from, for the host file
// hostFile.
func EventsFile(hostFile string) string { return hostFile + ".events" }

// AppendXID makes the library report XID xid on the GPU with index gpu
// (on its MIG device gi/ci, or the whole GPU when gi is negative) to every
// event set registered for critical XID events on it.
func AppendXID(hostFile string, gpu int, xid uint64, gi, ci int) error {
	line := fmt.Sprintf("xid %d %d\n", gpu, xid)
	if gi >= 0 {
		line = fmt.Sprintf("xid %d %d %d %d\n", gpu, xid, gi, ci)
	}
	f, err := os.OpenFile(EventsFile(hostFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	// One write of a whole line, so the library never reads half of it.
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
