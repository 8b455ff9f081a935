// Package engine configures container engines to offer gpuctk-runtime as
// a runtime named "nvidia", for `gpuctk runtime configure`.
//
// containerd gets a drop-in, /etc/containerd/conf.d/99-gpuctk.toml, in
// config version 2: containerd 1.7 reads version 2 as it is and containerd
// 2.x migrates it on load, so one file serves both. The runtime copies the
// options of the existing runc runtime and names gpuctk-runtime as its
// BinaryName; the main config gets an import of the drop-in folder when it
// lacks one, by a one-line edit that keeps the rest of the file byte for
// byte. CRI-O gets a drop-in under /etc/crio/crio.conf.d/; docker gets a
// runtimes entry and features.cdi in /etc/docker/daemon.json, other keys
// kept in their order. Podman needs nothing.
//
// Every function here computes [Change]s without touching the host; [Apply]
// writes them atomically, keeping a backup of each file of the user's that
// it rewrites. Configuring twice changes nothing the second time, and
// uninstalling removes what configuring added.
package engine
