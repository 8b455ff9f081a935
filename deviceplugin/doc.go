// Package deviceplugin serves the kubelet's device plugin API (v1beta1)
// for what a host offers: one gRPC socket and registration per Kubernetes
// resource of offer.Set.Resources (the offered devices as resources). Kubelet
// device IDs are the spec's index-style names ("0", "mig-3", "0::1");
// Allocate answers them as CDI names of the spec the plugin writes itself,
// the bytes `gpuctk cdi generate` writes, so a pod can only be handed a
// name that spec holds. A config change builds a new resolution, off the
// event loop that answers the kubelet, and swaps it whole; a bad one keeps
// the last good state. The plugin's own paths (spec, sockets) are taken
// back from whatever else appears there, and its devices are Unhealthy
// while no readable spec backs them.
package deviceplugin
