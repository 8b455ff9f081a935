package dra

import (
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// The values of the "type" attribute, which DeviceClasses select on.
const (
	TypeGPU     = "gpu"
	TypeMIG     = "mig"
	TypeReplica = "replica"
)

// Device is one device the driver publishes and the CDI entry behind it.
type Device struct {
	// Name is the device's name in its ResourceSlice, a DNS label.
	Name string
	offer.Device
}

// Devices returns what the driver publishes of set, in the spec's order.
// A GPU in MIG mode is left out: its MIG devices are published instead.
func Devices(set *offer.Set) []Device {
	var out []Device
	for _, d := range set.Devices {
		if d.GPU.MIGEnabled && d.MIG == nil {
			continue
		}
		out = append(out, Device{Name: deviceName(d), Device: d})
	}
	return out
}

// deviceName is the DNS-label name of an offered device: "gpu-0",
// "mig-4-0" (GPU 4, MIG index 0), "gpu-0-replica-1". MIG devices are named
// by GPU and MIG index rather than by host-wide ordinal, so that a new
// layout on one GPU renames no device of another.
func deviceName(d offer.Device) string {
	n := "gpu-" + strconv.Itoa(d.GPU.Index)
	if d.MIG != nil {
		n = "mig-" + strconv.Itoa(d.GPU.Index) + "-" + strconv.Itoa(d.MIG.Index)
	}
	if d.Share != nil {
		n += "-replica-" + strconv.Itoa(d.Replica)
	}
	return n
}

// CDIName returns the fully qualified CDI name of the device in a spec of
// the given kind: "nvidia.com/gpu=0::1".
func (d Device) CDIName(kind string) string { return kind + "=" + d.Device.Name() }

// Type returns the device's "type" attribute: gpu, mig or replica.
func (d Device) Type() string {
	switch {
	case d.Share != nil:
		return TypeReplica
	case d.MIG != nil:
		return TypeMIG
	}
	return TypeGPU
}

// API returns the device as a ResourceSlice lists it; host gives the
// driver and CUDA versions.
func (d Device) API(host *inventory.Host) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	str := func(k, v string) {
		if v != "" {
			attrs[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(v))}
		}
	}
	ver := func(k, v string) {
		if s := semver(v); s != "" {
			attrs[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{VersionValue: ptr.To(s)}
		}
	}
	num := func(k string, v int) {
		attrs[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(v))}
	}
	g := d.GPU
	str("type", d.Type())
	str("uuid", d.UUID())
	str("productName", g.Name)
	str("architecture", inventory.Architecture(g.ComputeCapability))
	ver("cudaComputeCapability", g.ComputeCapability)
	ver("driverVersion", host.DriverVersion)
	ver("cudaDriverVersion", host.CUDAVersion)
	strategy := "none"
	if d.Share != nil {
		strategy = d.Share.Strategy
		num("replica", d.Replica)
	}
	str("sharingStrategy", strategy)
	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		"memory": {Value: *resource.NewQuantity(int64(d.MemoryMiB())<<20, resource.BinarySI)},
	}
	if d.MIG != nil {
		num("index", d.MIG.Index)
		num("parentIndex", g.Index)
		str("parentUUID", g.UUID)
		str("migProfile", d.MIG.Profile)
		capacity["multiprocessors"] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(d.MIG.SMCount), resource.DecimalSI)}
	} else {
		num("index", g.Index)
	}
	return resourceapi.Device{Name: d.Name, Attributes: attrs, Capacity: capacity}
}

// semver returns a version as semantic versioning has it, which a version
// attribute must be: "9.0" is "9.0.0", the driver's "580.65.06" is
// "580.65.6"; "" for one that is not dot-separated numbers.
func semver(v string) string {
	parts := strings.Split(v, ".")
	if v == "" || len(parts) > 3 {
		return ""
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return ""
		}
		parts[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(parts, ".")
}

// truncate keeps a string attribute within the API's limit.
func truncate(v string) string {
	if len(v) > resourceapi.DeviceAttributeMaxValueLength {
		return v[:resourceapi.DeviceAttributeMaxValueLength]
	}
	return v
}

// Slices splits devices into the ResourceSlices of one pool, at most
// ResourceSliceMaxDevices each; a host without devices still publishes one
// empty slice, to say the driver runs.
func Slices(host *inventory.Host, devices []Device) [][]resourceapi.Device {
	out := [][]resourceapi.Device{{}}
	for _, d := range devices {
		if len(out[len(out)-1]) == resourceapi.ResourceSliceMaxDevices {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], d.API(host))
	}
	return out
}
