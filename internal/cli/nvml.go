package cli

import (
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/inventory/nvmlhost"
)

// openNVML returns the NVML inventory source over the library at libPath.
func openNVML(libPath string) (inventory.Source, error) {
	return nvmlhost.Open(libPath)
}
