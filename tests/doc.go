// Package tests holds the end-to-end tests: they build the shipped
// binaries, prepare fake driver roots and busybox root file systems, and
// drive real podman, runc, containerd, ldconfig, dpkg and rpm the way a
// user would. They need root; `make test` installs their prerequisites.
package tests
