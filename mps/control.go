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
// driver root, as driver.FindBinary finds it.
func FindControl(driverRoot string, opts ...driver.Option) (string, error) {
	p, err := driver.FindBinary(driverRoot, controlName, opts...)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: install the driver's MPS binaries or pass the right --driver-root", err)
	}
	return p, err
}
