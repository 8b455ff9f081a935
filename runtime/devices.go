package runtime

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/internal/quote"
)

const (
	// EnvVar is the variable through which docker and images request GPUs.
	EnvVar = "NVIDIA_VISIBLE_DEVICES"
	// CapabilitiesVar names the driver capabilities a container wants;
	// unset or empty means compute,utility (the spec's common edits).
	CapabilitiesVar = "NVIDIA_DRIVER_CAPABILITIES"
	// annotationPrefix marks CDI requests from Kubernetes device plugins.
	annotationPrefix = "cdi.k8s.io/"
	// MountDir holds /dev/null mounts, one per device, from device plugins
	// that do not trust the environment; "cdi/<qualified name>" also works.
	MountDir = "/var/run/nvidia-container-devices"
)

// request is the devices a container asks for, all fully qualified CDI
// names, and where the request came from (for messages).
type request struct {
	source  string
	devices []string
	// commonOnly is NVIDIA_VISIBLE_DEVICES=none: the driver without any
	// device, that is the specs' common edits alone.
	commonOnly bool
	seen       map[string]bool // devices, to add each once in linear time
	// optional are the capability devices NVIDIA_DRIVER_CAPABILITIES asks
	// for: injected when the spec has them (a host without graphics files
	// has no capability-graphics), never an error when it does not.
	optional []string
	// annotated: the devices come from CDI annotations (a device plugin's),
	// which name the capability devices the node gives themselves.
	annotated bool
}

// wantsCapabilities reports whether NVIDIA_DRIVER_CAPABILITIES may add
// capability devices to r: only beside the devices the container's
// environment or mounts asked for, which are all of the spec's kind
// (qualify refuses others there). A capability device brings the spec's
// common edits (the driver's control nodes, its files, the hook), which a
// container that asked for another kind's devices, or for none
// (NVIDIA_VISIBLE_DEVICES=none), must not get from a variable its image
// sets; and where a device plugin's annotations name the devices, the node
// decides the capabilities, not the pod.
func (r *request) wantsCapabilities() bool {
	return !r.commonOnly && !r.annotated
}

// maxDevices bounds the distinct devices one container may ask for: the
// largest host's spec, with every replica name, holds 1,361. Past it a
// request is refused before any of it is resolved, so a variable naming a
// million devices costs one pass over its text.
const maxDevices = 4096

// requested reads the device request of a container spec. The first source
// that asks for anything wins: annotations, then the environment, then
// mounts. It returns nil when the container asks for nothing. kind is the
// vendor/class that qualifies our short device names ("0", "mig-0").
//
// NVIDIA_VISIBLE_DEVICES=void means the devices are in already: our specs'
// common edits set it, so a container whose engine injected the devices
// itself (containerd 2.x and CRI-O resolve cdi.k8s.io/ annotations) is not
// given them twice.
//
// The image sets the environment and may bind /dev/null where it likes, so
// those two sources name only devices of kind; annotations, set by the
// orchestrator, may name any. With acceptEnv false the variable is not a
// source at all (void still means "injected already").
func requested(spec *specs.Spec, kind string, acceptEnv bool) (*request, error) {
	val := envValue(spec)
	if strings.TrimSpace(val) == "void" {
		return nil, nil
	}
	if r, err := fromAnnotations(spec.Annotations); r != nil || err != nil {
		return r, err
	}
	if !acceptEnv {
		val = ""
	}
	switch strings.TrimSpace(val) {
	case "none":
		return &request{source: EnvVar + "=none", commonOnly: true}, nil
	case "", MountDir:
		return fromMounts(spec.Mounts, kind)
	}
	r := &request{source: EnvVar}
	for d := range strings.SplitSeq(val, ",") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		q, err := qualify(d, kind)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", EnvVar, quote.Clip(val, quote.Bytes), err)
		}
		if err := r.add(q); err != nil {
			return nil, err
		}
	}
	if len(r.devices) == 0 {
		return nil, nil
	}
	return r, nil
}

func (r *request) add(device string) error {
	if r.seen[device] {
		return nil
	}
	if len(r.devices) == maxDevices {
		return fmt.Errorf("%s asks for more than %d devices, more than any host has: name fewer, or `all`", r.source, maxDevices)
	}
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[device] = true
	r.devices = append(r.devices, device)
	return nil
}

// fromAnnotations reads cdi.k8s.io/ annotations, in key order; their
// values are comma lists of fully qualified names.
func fromAnnotations(annotations map[string]string) (*request, error) {
	var keys []string
	for k := range annotations {
		if strings.HasPrefix(k, annotationPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	slices.Sort(keys)
	r := &request{source: "annotation " + keys[0], annotated: true}
	if len(keys) > 1 {
		r.source = "annotations " + quote.List(keys, maxListed)
	}
	for _, k := range keys {
		for d := range strings.SplitSeq(annotations[k], ",") {
			d = strings.TrimSpace(d)
			if d == "" {
				continue
			}
			if _, _, _, err := parser.ParseQualifiedName(d); err != nil {
				return nil, fmt.Errorf("annotation %s: %q is not a fully qualified CDI device name (vendor.com/class=name): %w", quote.Clip(k, quote.Bytes), quote.Clip(d, quote.Bytes), err)
			}
			if err := r.add(d); err != nil {
				return nil, err
			}
		}
	}
	if len(r.devices) == 0 {
		return nil, nil
	}
	return r, nil
}

// envValue returns the last NVIDIA_VISIBLE_DEVICES of the process, as a
// shell would see it after later assignments override earlier ones.
func envValue(spec *specs.Spec) string { return lastEnv(spec, EnvVar) }

func lastEnv(spec *specs.Spec, name string) string {
	if spec.Process == nil {
		return ""
	}
	val := ""
	for _, e := range spec.Process.Env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			val = v
		}
	}
	return val
}

// capabilities returns the capability devices NVIDIA_DRIVER_CAPABILITIES
// asks for, qualified with kind, and the names in it that are no
// capability. compute and utility are the common edits every device
// brings; "all" is every capability's device.
func capabilities(spec *specs.Spec, kind string) (devices, unknown []string) {
	var names []string
	seen := map[string]bool{}
	for c := range strings.SplitSeq(lastEnv(spec, CapabilitiesVar), ",") {
		c = strings.TrimSpace(c)
		if seen[c] || len(seen) > len(capability.Extra())+maxListed {
			continue // bounded: a list of a million names costs one pass
		}
		seen[c] = true
		names = append(names, c)
	}
	devices, unknown = capability.Devices(names)
	for i, d := range devices {
		devices[i] = kind + "=" + d
	}
	return devices, unknown
}

// fromMounts reads /dev/null mounts under MountDir.
func fromMounts(mounts []specs.Mount, kind string) (*request, error) {
	r := &request{source: "mounts under " + MountDir}
	for _, m := range mounts {
		name, ok := strings.CutPrefix(path.Clean(m.Destination), MountDir+"/")
		if !ok || m.Source != "/dev/null" {
			continue
		}
		if q, ok := strings.CutPrefix(name, "cdi/"); ok {
			name = q
		}
		q, err := qualify(name, kind)
		if err != nil {
			return nil, fmt.Errorf("mount %s: %w", quote.Clip(m.Destination, quote.Bytes), err)
		}
		if err := r.add(q); err != nil {
			return nil, err
		}
	}
	if len(r.devices) == 0 {
		return nil, nil
	}
	return r, nil
}

// qualify turns one of our device names into a CDI name of kind; a fully
// qualified name stays as it is, and must be of kind.
func qualify(name, kind string) (string, error) {
	if strings.Contains(name, "=") {
		vendor, class, _, err := parser.ParseQualifiedName(name)
		if err != nil {
			return "", fmt.Errorf("%q is not a CDI device name: %w", quote.Clip(name, quote.Bytes), err)
		}
		if vendor+"/"+class != kind {
			return "", fmt.Errorf("%q is not a %s device: name devices of other kinds with cdi.k8s.io/ annotations", quote.Clip(name, quote.Bytes), kind)
		}
		return name, nil
	}
	if err := parser.ValidateDeviceName(name); err != nil {
		return "", fmt.Errorf("%q is not a device name (0, GPU-<uuid>, mig-0, 0:1, 0::1, all or vendor.com/class=name): %w", quote.Clip(name, quote.Bytes), err)
	}
	return kind + "=" + name, nil
}
