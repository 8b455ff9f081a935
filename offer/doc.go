// Package offer resolves a host and a configuration into the devices
// gpuctk offers: each CDI device entry with all its names, the physical
// device behind it, how it is shared (strategy, replica number, limits,
// the Kubernetes resource) and the configuration file and [[sharing]]
// entry it came from, and the Kubernetes resources the device plugin
// advertises of them.
//
// It is the one place that decides what is offered and checks every rule
// that needs the host: a selector that matches nothing, a device claimed
// by two entries, replica names, the MPS client limits and the MPS socket
// path, and the device plugin's rules of resources (Set.Refused, and
// Set.Warnings for what does not stop it). The spec writer (package cdi),
// the MPS manager (package mps), the device plugin, the labeller and
// `gpuctk config check` each read the Set it returns; none re-derives
// names or re-checks a rule.
package offer
