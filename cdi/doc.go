// Package cdi turns a host's inventory and driver files into a Container
// Device Interface spec, and lists the devices of the specs on a host.
//
// One spec holds every device of the host under one kind (nvidia.com/gpu
// by default): each full GPU with MIG disabled ("0", "GPU-<uuid>"), each
// MIG device ("mig-N", "G:M", "MIG-<uuid>"), each replica of a shared
// device ("<name>::k" for the names WithReplicaNames picks, by default the
// index one; the device itself then not offered whole) and "all". The spec's common edits carry what every device needs once
// (control nodes, driver libraries, binaries, firmware, sockets and one
// call of gpuctk-hook that makes the library links and the linker cache);
// a device's own edits carry only its nodes, plus the MPS client settings
// for an MPS replica.
//
// The spec is validated with the CDI library's own validators and carries
// the lowest cdiVersion its content needs, so that older runtimes (podman
// 4.3 reads at most 0.5.0) accept it.
package cdi
