package mps

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/gpuctk/gpuctk/driver"
)

// controlName is the MPS control daemon's binary.
const controlName = "nvidia-cuda-mps-control"

// FindControl returns the path of nvidia-cuda-mps-control under the
// driver root.
func FindControl(driverRoot string) (string, error) {
	p, err := driver.FindBinary(driverRoot, controlName)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: install the driver's MPS binaries or pass the right --driver-root", err)
	}
	return p, err
}
