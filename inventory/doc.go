// Package inventory describes the GPUs of a host: full GPUs, their MIG
// instances, and the driver and CUDA versions.
//
// A Host comes from a Source. Two sources exist: NVML (the driver's
// management library, used on real hosts; package inventory/nvmlhost) and
// simulated profiles (TOML
// descriptions of a host, embedded or read from a file, used on machines
// without a GPU and in tests). Both produce the same Host value, so
// everything downstream (spec generation, MPS management) is oblivious to
// where the description came from.
package inventory
