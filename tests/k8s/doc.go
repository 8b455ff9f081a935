// Package k8s is the device plugin's end-to-end test against a real
// kubelet (standalone, static pods, built from the Go module proxy by
// build-kubelet.sh) and containerd 2.4 with CDI, all in private
// namespaces (run-standalone.sh) so the host is left as found. The plugin
// runs as a host process, and, in TestKubeletDaemonSet, as the pod of
// deployments/kubernetes/device-plugin.yaml from the `make image` archive.
package k8s
