// Package driver finds the NVIDIA driver's files on a host: device nodes
// (with their type, major and minor), the driver's libraries and their
// SONAMEs, binaries, GSP firmware and sockets, and the minors of the MIG
// capability nodes.
//
// Every lookup is relative to a driver root (where the driver's files are
// installed: "/" or, for a containerised driver, /run/nvidia/driver) and a
// dev root (where /dev and /proc are), so discovery runs unchanged against
// fake roots in tests. Standard returns the files a standard install would
// have, for simulated hosts described without a root.
//
// Discovery produces CDI types directly: device nodes as specs.DeviceNode
// and files as specs.Mount, ready for a spec's container edits. Gather
// then moves the regular files into folder mounts, once per capability,
// the hook linking each file's usual path into them (Files.Linked): the
// driver folder of hard links under the driver root; with the driver on
// another file system, its own folders mounted whole where they hold
// nothing else, and a folder of copies in a store for the rest.
package driver
