// Package capability names the driver capabilities, as
// NVIDIA_DRIVER_CAPABILITIES spells them, and the spec's capability
// devices that carry the files of each one beyond compute and utility.
//
// It is a leaf: gpuctk-runtime reads a container's capabilities on every
// start and links this package, not the driver discovery behind the spec.
package capability

import "slices"

// Capability is a driver capability, as NVIDIA_DRIVER_CAPABILITIES names
// it: which of the driver's files a container gets.
type Capability string

// The driver capabilities. Compute and utility are every container's (the
// spec's common edits); each other one is a device of its own.
const (
	Compute      Capability = "compute"
	Utility      Capability = "utility"
	Video        Capability = "video"
	Graphics     Capability = "graphics"
	Display      Capability = "display"
	NGX          Capability = "ngx"
	OptiX        Capability = "optix"
	PKCS11       Capability = "pkcs11"
	SandboxUtils Capability = "sandboxutils"
)

// DevicePrefix starts the names of the capability devices in the spec:
// capability-graphics, capability-video, ... ("all" is each of them).
const DevicePrefix = "capability-"

// Device returns the name of a capability's device in the spec.
func (c Capability) Device() string { return DevicePrefix + string(c) }

// Extra returns the capabilities beyond compute and utility, in the order
// the spec lists their devices.
func Extra() []Capability {
	return []Capability{Graphics, Video, Display, NGX, OptiX, PKCS11, SandboxUtils}
}

// Devices returns the capability devices a list of capability names, as
// NVIDIA_DRIVER_CAPABILITIES spells them, asks for, each once and in the
// list's order, and the names that are no capability. Compute and utility
// ask for none (they are every container's); "all" asks for every one,
// in Extra's order, whatever else the list holds.
func Devices(names []string) (devices, unknown []string) {
	known := map[string]bool{}
	for _, c := range Extra() {
		known[string(c)] = true
	}
	for _, n := range names {
		switch {
		case n == "" || n == string(Compute) || n == string(Utility):
		case n == "all":
			devices = devices[:0]
			for _, c := range Extra() {
				devices = append(devices, c.Device())
			}
			return devices, nil
		case !known[n]:
			if !slices.Contains(unknown, n) {
				unknown = append(unknown, n)
			}
		case !slices.Contains(devices, Capability(n).Device()):
			devices = append(devices, Capability(n).Device())
		}
	}
	return devices, unknown
}
