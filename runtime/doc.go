// Package runtime is gpuctk-runtime, a drop-in low-level OCI runtime that
// gives containers run with the runtime class "nvidia" the same CDI edits
// that `--device nvidia.com/gpu=...` gives.
//
// For every command but `create` it execs the real runtime (the first of
// the configured runtimes found on PATH, runc then crun by default) with
// its arguments untouched and does nothing else. On `create` it reads the
// bundle's config.json, collects the requested devices from, in order of
// precedence, `cdi.k8s.io/` annotations, NVIDIA_VISIBLE_DEVICES and
// /dev/null mounts under /var/run/nvidia-container-devices/, resolves them
// through the CDI specs in the configured spec dirs, applies their edits,
// sets NVIDIA_VISIBLE_DEVICES=void so nothing injects twice, drops a legacy
// nvidia-container-runtime-hook, writes config.json back atomically and
// execs the real runtime. A create that requests nothing leaves config.json
// untouched, byte for byte; so does one whose NVIDIA_VISIBLE_DEVICES is
// already void, which is how an engine that injected the devices itself
// (containerd 2.x and CRI-O resolve cdi.k8s.io/ annotations) leaves it.
//
// Resolved devices are cached under [runtime] cache-dir, per state of the
// spec dirs, so that create reads one file and decodes only the edits of
// the devices it asks for instead of parsing every spec: see cache.go.
// gpuctk's own spec is read here (specyaml.go), any other through the CDI
// library in a `gpuctk cdi resolve` child (resolve.go), and the edits are
// applied as the library applies them (edits.go): the package does not
// import the library, whose start-up would cost every create. WarmCache
// fills the cache for `gpuctk cdi generate` and the device plugin.
//
// The command line (configuration, --version) is cmd/gpuctk-runtime's;
// this package holds the operations.
//
// Its log goes to files, never to the stdout its caller reads: the file in
// [runtime] log-file of the configuration, and the file of runc's global
// --log option in runc's format (--log-format text|json, lower-case levels)
// so that containerd's shim reports our error as runc's.
package runtime
