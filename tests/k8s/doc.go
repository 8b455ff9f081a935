// Package k8s is the device plugin's end-to-end test against a real
// kubelet (standalone, static pods, built from the Go module proxy by
// build-kubelet.sh) and containerd 2.4 with CDI, all in private
// namespaces (run-standalone.sh) so the host is left as found.
package k8s
