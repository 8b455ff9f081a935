// Package mig partitions GPUs into MIG devices from a named layout in
// NVIDIA mig-parted's config format (version v1, mig-configs). It takes
// the GPUs' MIG profiles (slices, memory, SMs, engines, placements) from
// NVML on a real host (Profiles, inventory/nvmlhost) and from its embedded
// model data (models/*.toml, one file a GPU model, its source cited) on a
// simulated one, plans the changes that turn a host's current layout
// into the chosen one (MIG mode, GPU and compute instances to destroy and
// create), and carries a plan out through a Device: NVML on a real host
// (inventory/nvmlhost) or a simulated host profile file (Simulator).
//
// A plan is always computed from the state the host reports, so applying
// again after a failure half-way converges, and applying a layout the host
// already has changes nothing.
//
// The built-in layouts are NVIDIA's config-default.yaml as the GPU
// operator ships it (configs/). An entry's device-filter selects GPUs by
// PCI device id (inventory.GPU.PCIDeviceID), as mig-parted matches it, or
// by product name.
package mig
