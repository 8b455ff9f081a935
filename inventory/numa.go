package inventory

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuctk/gpuctk/internal/pcibus"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

// ReadPlatform reads what NVML does not say from sysfs under devRoot, as
// NVIDIA's device plugin and GPU feature discovery read it: each GPU's
// NUMA node (ReadNUMA) and PCI class, and the machine's product name
// (/sys/class/dmi/id/product_name). What is set already (a simulated
// host's profile) is kept; what cannot be read stays unknown.
func (h *Host) ReadPlatform(devRoot string) {
	h.ReadNUMA(devRoot)
	if h.Machine == "" {
		if data, err := readfile.Limited(filepath.Join(devRoot, "sys", "class", "dmi", "id", "product_name"), 4096); err == nil {
			h.Machine = strings.TrimSpace(string(data))
		}
	}
	for i := range h.GPUs {
		g := &h.GPUs[i]
		bus, ok := pcibus.Sysfs(g.PCIBusID)
		if g.PCIClass != 0 || !ok {
			continue
		}
		data, err := readfile.Limited(filepath.Join(devRoot, "sys", "bus", "pci", "devices", bus, "class"), 64)
		if err != nil {
			continue
		}
		if c, err := strconv.ParseUint(strings.TrimSpace(string(data)), 0, 32); err == nil {
			g.PCIClass = uint32(c)
		}
	}
}

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
