package inventory

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuctk/gpuctk/internal/pcibus"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

// ReadNUMA sets the NUMA node of each GPU that has none from sysfs under
// devRoot, as NVIDIA's device plugin reads it: the numa_node file of the
// GPU's PCI device, /sys/bus/pci/devices/<bus id as the kernel names it>
// (see pcibus.Sysfs). A GPU with no such file, or -1 there (no NUMA
// affinity), or no PCI bus id, keeps none.
func (h *Host) ReadNUMA(devRoot string) {
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if g.NUMANode != nil {
			continue
		}
		bus, ok := pcibus.Sysfs(g.PCIBusID)
		if !ok {
			continue
		}
		data, err := readfile.Regular(filepath.Join(devRoot, "sys", "bus", "pci", "devices", bus, "numa_node"), 4096)
		if err != nil {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && n >= 0 {
			g.NUMANode = &n
		}
	}
}
