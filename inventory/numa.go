package inventory

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ReadNUMA sets the NUMA node of each GPU that has none from sysfs under
// devRoot, as NVIDIA's device plugin reads it: the numa_node file of the
// GPU's PCI device (NVML's 8-digit PCI domain cut to sysfs's 4). A GPU
// with no such file, or -1 there (no NUMA affinity), keeps none.
func (h *Host) ReadNUMA(devRoot string) {
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if g.NUMANode != nil {
			continue
		}
		bus := strings.ToLower(g.PCIBusID)
		if len(bus) == len("00000000:00:00.0") {
			bus = bus[4:]
		}
		if bus == "" || strings.ContainsAny(bus, "/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(devRoot, "sys", "bus", "pci", "devices", bus, "numa_node"))
		if err != nil {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && n >= 0 {
			g.NUMANode = &n
		}
	}
}
