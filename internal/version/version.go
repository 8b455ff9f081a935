// Package version holds the version stamped into the binaries at build
// time with -ldflags "-X github.com/gpuctk/gpuctk/internal/version.Version=...".
package version

// Version is the release version; "dev" in unstamped builds.
var Version = "dev"
