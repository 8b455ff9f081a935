// Package hook holds the operations of gpuctk-hook, the program a CDI spec
// runs as a createContainer hook (cmd/gpuctk-hook parses its command line):
// [Setup] finds the container's root file system from the bundle's
// config.json (the bundle from the OCI state on stdin, or, under runc, from
// the folders runc works in), and does the in-container work the driver's
// files need in one invocation: library links (SONAME and .so), the
// linker cache (with an image's CUDA forward-compatibility libraries
// first when the spec allows it, compat.go), and a read-only copy of the
// driver's params saying ModifyDeviceFiles: 0 over the container's, so
// its CUDA driver creates no device nodes (params.go).
//
// The hook runs as root on the host, on a root file system an untrusted
// image controls. Every file operation inside it goes through os.Root, so
// a symlink planted in the image cannot redirect a write outside the root;
// every file it reads from the image is opened without following a final
// link or blocking, must be a regular file, and is size-capped, so a FIFO,
// a device or a huge file costs milliseconds. The ldconfig it may start
// runs under a timeout and memory and file-size limits, with an empty
// environment. Under a user namespace, what it creates belongs to the
// container's root.
package hook
