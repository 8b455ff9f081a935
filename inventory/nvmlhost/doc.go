// Package nvmlhost describes a host through NVML, the driver's management
// library (libnvidia-ml.so.1, loaded with dlopen at run time): GPUs, their
// MIG devices, and the driver and CUDA versions, as an inventory.Host.
//
// It is apart from package inventory so that what reads the inventory
// model (the config, the runtime) does not link go-nvml and cgo.
package nvmlhost
