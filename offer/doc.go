// Package offer resolves a host and a configuration into the devices
// gpuctk offers: each CDI device entry with all its names, the physical
// device behind it, how it is shared (strategy, replica number, limits,
// the Kubernetes resource) and the configuration file and [[sharing]]
// entry it came from.
//
// It is the one place that decides what is offered and checks every rule
// that needs the host: a selector that matches nothing, a device claimed
// by two entries, replica names, the MPS client limits and the MPS socket
// path. The spec writer (package cdi), the MPS manager (package mps) and
// the device plugin each read the Set it returns; none re-derives names or
// re-checks a rule.
package offer
