// Package hook is gpuctk-hook: the program a CDI spec runs as a
// createContainer hook. It reads the OCI state on stdin, finds the
// container's root file system from the bundle's config.json, and does
// the in-container work the driver's files need, in one invocation:
// library links (SONAME and .so) and the linker cache.
//
// The hook runs as root on the host, on a root file system an untrusted
// image controls. Every file operation inside it goes through os.Root, so
// a symlink planted in the image cannot redirect a write outside the root;
// processes it starts get a fixed environment, never the container's.
//
// A subcommand the hook does not know is warned about and ignored, so a
// spec written by a newer generator never breaks containers on a host
// with an older hook.
package hook
