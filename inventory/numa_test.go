package inventory

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestReadNUMA: each GPU's NUMA node from sysfs under the dev root, by its
// PCI bus ID in sysfs's form (a domain of 0x10000 or more keeps its
// digits: 10000:01:00.0 is not 0000:01:00.0); -1 (no affinity), a missing
// file or junk leave none, and a node the inventory already has (a
// profile's, NVML's) is kept.
func TestReadNUMA(t *testing.T) {
	devRoot := t.TempDir()
	for bus, node := range map[string]string{
		"0000:01:00.0":  "1\n",
		"0000:41:00.0":  "-1\n",
		"0000:81:00.0":  "junk\n",
		"0000:c1:00.0":  "0\n",
		"10000:01:00.0": "2\n",
		"0001:01:00.0":  "3\n",
	} {
		dir := filepath.Join(devRoot, "sys", "bus", "pci", "devices", bus)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(node), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	three := 3
	h := &Host{GPUs: []GPU{
		{Index: 0, PCIBusID: "00000000:01:00.0"},
		{Index: 1, PCIBusID: "00000000:41:00.0"},
		{Index: 2, PCIBusID: "00000000:81:00.0"},
		{Index: 3, PCIBusID: "0000:C1:00.0"},
		{Index: 4, PCIBusID: "00000000:E1:00.0"},
		{Index: 5, PCIBusID: "00000000:01:00.0", NUMANode: &three},
		{Index: 6, PCIBusID: "../../../../etc"},
		{Index: 7, PCIBusID: "00010000:01:00.0"},
		{Index: 8, PCIBusID: "00000001:01:00.0"},
		{Index: 9, PCIBusID: ""},
	}}
	h.ReadNUMA(devRoot)
	want := []string{"1", "none", "none", "0", "none", "3", "none", "2", "3", "none"}
	for i, g := range h.GPUs {
		got := "none"
		if g.NUMANode != nil {
			got = strconv.Itoa(*g.NUMANode)
		}
		if got != want[i] {
			t.Errorf("GPU %d (%s): NUMA node %s, want %s", g.Index, g.PCIBusID, got, want[i])
		}
	}
}

// TestReadPlatform reads each GPU's PCI class and the machine's product
// name from a sysfs under a root, as GPU feature discovery does; what a
// profile set is kept, and what is missing stays unknown.
func TestReadPlatform(t *testing.T) {
	root := t.TempDir()
	write := func(p, data string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/class/dmi/id/product_name", "DGX A100 920-23687-2530-000\n")
	write("sys/bus/pci/devices/0000:07:00.0/class", "0x030200\n")
	write("sys/bus/pci/devices/0000:0f:00.0/class", "0x030000\n")
	h := &Host{GPUs: []GPU{
		{Index: 0, PCIBusID: "00000000:07:00.0"},
		{Index: 1, PCIBusID: "00000000:0F:00.0"},
		{Index: 2, PCIBusID: "00000000:47:00.0"},
		{Index: 3, PCIBusID: "00000000:4E:00.0", PCIClass: 0x030200},
	}}
	h.ReadPlatform(root)
	if h.Machine != "DGX A100 920-23687-2530-000" {
		t.Errorf("machine %q", h.Machine)
	}
	for i, want := range []uint32{0x030200, 0x030000, 0, 0x030200} {
		if got := h.GPUs[i].PCIClass; got != want {
			t.Errorf("GPU %d: class %#06x, want %#06x", i, got, want)
		}
	}
}
