package cli

import (
	"github.com/gpuctk/gpuctk/inventory"
)

// openNVML returns the NVML inventory source over the library at libPath.
func openNVML(libPath string) (inventory.Source, error) {
	return inventory.OpenNVML(libPath)
}
