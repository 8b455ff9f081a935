package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gpuctk/gpuctk/cdi"
)

// What NVIDIA's own components leave on a node, relative to the host's
// root: the device plugin's sockets beside the kubelet's, GPU feature
// discovery's NFD feature file, and nvidia-ctk's spec (its refresh units
// write /var/run/cdi/nvidia.yaml, `nvidia-ctk cdi generate` /etc/cdi's).
const (
	nvidiaPluginSockets = "var/lib/kubelet/device-plugins/nvidia-*.sock"
	gfdFeatureFile      = "etc/kubernetes/node-feature-discovery/features.d/gfd"
)

// migration lists, in the order to remove them, what of NVIDIA's device
// plugin, GPU feature discovery and nvidia-ctk is on the host under root,
// each with what to do: while they run beside gpuctk, a resource is
// advertised twice, nvidia.com/ labels come from two files, and two specs
// define the same CDI names. specDirs are the host's spec folders.
func migration(root string, specDirs []string, kind string) []string {
	var out []string
	if socks, _ := filepath.Glob(filepath.Join(root, nvidiaPluginSockets)); len(socks) > 0 {
		names := make([]string, len(socks))
		for i, s := range socks {
			names[i] = filepath.Base(s)
		}
		out = append(out, fmt.Sprintf("1. NVIDIA's device plugin serves here (%s in %s): remove it first (helm uninstall its release, or kubectl delete its DaemonSet), "+
			"once GPU pods are drained: both plugins would advertise the same resources",
			strings.Join(names, ", "), filepath.Dir(socks[0])))
	}
	if p := filepath.Join(root, gfdFeatureFile); fileExists(p) {
		out = append(out, fmt.Sprintf("2. GPU feature discovery's labels are in %s: remove GFD (its DaemonSet, or gfd.enabled=false in NVIDIA's chart) and the file: "+
			"gpuctk's plugin writes the same nvidia.com/ labels (--labels-dir)", p))
	}
	var dirs []string
	for _, d := range specDirs {
		dirs = append(dirs, filepath.Join(root, d))
	}
	for _, p := range cdi.ForeignSpecs(dirs, kind) {
		out = append(out, fmt.Sprintf("3. %s is another tool's spec of kind %s (nvidia-ctk's): stop what writes it (systemctl disable --now nvidia-cdi-refresh.path nvidia-cdi-refresh.service) and remove it, "+
			"after the device plugin: it defines the names gpuctk's spec does", p, kind))
	}
	return out
}
