// Package dra is gpuctk's Dynamic Resource Allocation driver: one more
// reader of the resolution (package offer) beside the spec writer and the
// device plugin.
//
// Devices turns an offer.Set into the devices a ResourceSlice publishes:
// one per whole GPU, MIG device and replica, under a DNS-label name
// (gpu-0, mig-4-0, gpu-0-replica-1) that maps to exactly one CDI device of
// the spec the driver writes (the file `gpuctk cdi generate` writes). A
// GPU in MIG mode is published through its MIG devices only: a whole GPU
// and its MIG devices allocated to two claims would share hardware.
//
// Config is the opaque per-claim configuration (gpu.gpuctk.io/v1alpha1,
// kind GpuConfig), decoded strictly. Driver prepares and unprepares claims
// independently of gRPC, and checkpoints what it prepared atomically so a
// restarted driver still unprepares it; Plugin adapts it to the kubelet
// plugin helper of k8s.io/dynamic-resource-allocation.
package dra
