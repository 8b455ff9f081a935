package labels

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
)

// Prefix is the label domain.
const Prefix = "nvidia.com/"

// Labels are a node's labels, by key.
type Labels map[string]string

// For returns the labels of what a host offers, under the device plugin's
// settings. A node's labels describe its first GPU (or, under the single
// MIG strategy, its first MIG device), as GPU feature discovery's do:
// nodeSelectors pick nodes of one kind. Under single, a node whose GPUs
// are not all in MIG mode with MIG devices of one profile is marked
// invalid (see invalidLabels).
func For(set *offer.Set, k config.Kubernetes) (Labels, error) {
	h := set.Host
	l := Labels{}
	if len(h.GPUs) == 0 {
		return l, nil
	}
	g := &h.GPUs[0]
	major, minor := computeCapability(g.ComputeCapability)
	l["gpu.present"] = "true"
	l["gpu.count"] = strconv.Itoa(len(h.GPUs))
	var productParts []string // after the name: "MIG", the profile, "SHARED"
	l["gpu.memory"] = strconv.FormatUint(g.MemoryMiB, 10)
	l["gpu.family"] = inventory.Architecture(g.ComputeCapability)
	l["gpu.compute.major"] = strconv.Itoa(major)
	l["gpu.compute.minor"] = strconv.Itoa(minor)
	l["mig.capable"] = strconv.FormatBool(migCapable(h))
	l["mig.strategy"] = k.MIGStrategy
	if err := driverLabels(l, h); err != nil {
		return nil, err
	}
	l["gpu.machine"] = machine(h.Machine)
	l["gpu.mode"] = mode(h)
	if c := clique(h); c != "" {
		l["gpu.clique"] = c
	}

	migs := slices.DeleteFunc(h.Devices(), func(d inventory.Device) bool { return !d.IsMIG() })
	var invalid *inventory.GPU // under single, a node it cannot describe
	switch k.MIGStrategy {
	case config.MIGSingle:
		if invalid = singleInvalid(h); invalid == nil && len(migs) > 0 {
			m := migs[0].MIG
			gi, ci := sliceCounts(m.Profile)
			l["gpu.count"] = strconv.Itoa(len(migs))
			productParts = []string{"MIG", migName(m.Profile)}
			l["gpu.memory"] = strconv.FormatUint(m.MemoryMiB, 10)
			l["gpu.multiprocessors"] = strconv.Itoa(m.SMCount)
			l["gpu.slices.gi"] = strconv.Itoa(gi)
			l["gpu.slices.ci"] = strconv.Itoa(ci)
			engineLabels(l, "gpu.", m.Engines)
		}
	case config.MIGMixed:
		mixedLabels(l, migs, set.Shared, k)
	}

	// Sharing, as nvidia.com/gpu's replicas have it.
	l["gpu.replicas"] = "1"
	l["gpu.sharing-strategy"] = "none"
	l["mps.capable"] = "false"
	for _, s := range set.Shared {
		if s.IsMPS() {
			l["mps.capable"] = "true"
		}
	}
	if s := gpuShare(set.Shared, k); s != nil {
		l["gpu.replicas"] = strconv.Itoa(s.Replicas)
		l["gpu.sharing-strategy"] = s.Strategy
		if asGPU(s, k) && !k.RenameShared {
			productParts = append(productParts, "SHARED")
		}
	} else if k.MIGStrategy == config.MIGMixed && !slices.ContainsFunc(h.GPUs, func(g inventory.GPU) bool { return !g.MIGEnabled }) {
		// No nvidia.com/gpu at all: GPU feature discovery gives a GPU in
		// MIG mode 0 replicas.
		l["gpu.replicas"] = "0"
	}
	l["gpu.product"] = product(g.Name, productParts...)
	if invalid != nil {
		invalidLabels(l, invalid)
	}
	out := Labels{}
	for key, v := range l {
		out[Prefix+key] = v
	}
	return out, nil
}

// singleInvalid returns the first GPU in MIG mode when the single
// strategy cannot describe the host, as GPU feature discovery judges it: a
// GPU in MIG mode without MIG devices, GPUs in and out of MIG mode, or MIG
// devices of several profiles. It returns nil when it can, and when no GPU
// is in MIG mode (the labels are then those of whole GPUs).
func singleInvalid(h *inventory.Host) *inventory.GPU {
	var first *inventory.GPU
	whole, empty := false, false
	profiles := map[string]bool{}
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if !g.MIGEnabled {
			whole = true
			continue
		}
		if first == nil {
			first = g
		}
		empty = empty || len(g.MIG) == 0
		for _, m := range g.MIG {
			profiles[m.Profile] = true
		}
	}
	if first == nil || !whole && !empty && len(profiles) == 1 {
		return nil
	}
	return first
}

// invalidLabels marks a node the single strategy cannot describe, as GPU
// feature discovery does: gpu.product is the name of its first GPU in MIG
// mode followed by -MIG-INVALID, and it has no devices, replicas or memory
// (gpu.count, gpu.replicas and gpu.memory 0, gpu.sharing-strategy none),
// so that no nodeSelector for a product or a size picks it.
func invalidLabels(l Labels, g *inventory.GPU) {
	l["gpu.product"] = product(g.Name, "MIG", "INVALID")
	l["gpu.count"] = "0"
	l["gpu.replicas"] = "0"
	l["gpu.sharing-strategy"] = "none"
	l["gpu.memory"] = "0"
}

// mixedLabels adds the mixed strategy's labels of each MIG profile,
// mig-<profile>.*, as its first MIG device has them: GPU feature discovery
// labels each nvidia.com/mig-<profile> resource.
func mixedLabels(l Labels, migs []inventory.Device, shared []*offer.Share, k config.Kubernetes) {
	for _, d := range migs {
		p := "mig-" + migName(d.MIG.Profile) + "."
		n, _ := strconv.Atoi(l[p+"count"])
		l[p+"count"] = strconv.Itoa(n + 1)
		if n > 0 {
			continue
		}
		gi, ci := sliceCounts(d.MIG.Profile)
		parts := []string{"MIG", migName(d.MIG.Profile)}
		l[p+"replicas"], l[p+"sharing-strategy"] = "1", "none"
		if s := profileShare(shared, d.MIG.Profile); s != nil {
			l[p+"replicas"], l[p+"sharing-strategy"] = strconv.Itoa(s.Replicas), s.Strategy
			if s.Resource == "" && !k.RenameShared {
				parts = append(parts, "SHARED")
			}
		}
		l[p+"product"] = product(d.GPU.Name, parts...)
		l[p+"memory"] = strconv.FormatUint(d.MIG.MemoryMiB, 10)
		l[p+"multiprocessors"] = strconv.Itoa(d.MIG.SMCount)
		l[p+"slices.gi"] = strconv.Itoa(gi)
		l[p+"slices.ci"] = strconv.Itoa(ci)
		engineLabels(l, p, d.MIG.Engines)
	}
}

// engineLabels adds a MIG device's engines under prefix, as GPU feature
// discovery names them: engines.copy, .decoder, .encoder, .jpeg, .ofa.
func engineLabels(l Labels, prefix string, e inventory.Engines) {
	l[prefix+"engines.copy"] = strconv.Itoa(e.Copy)
	l[prefix+"engines.decoder"] = strconv.Itoa(e.Decoder)
	l[prefix+"engines.encoder"] = strconv.Itoa(e.Encoder)
	l[prefix+"engines.jpeg"] = strconv.Itoa(e.JPEG)
	l[prefix+"engines.ofa"] = strconv.Itoa(e.OFA)
}

// profileShare returns the first shared MIG device of a profile, nil when
// none of its MIG devices is shared. Its replicas are what a pod asking
// for nvidia.com/mig-<profile> (or the entry's resource) gets.
func profileShare(shared []*offer.Share, profile string) *offer.Share {
	for _, s := range shared {
		if s.MIG != nil && s.MIG.Profile == profile {
			return s
		}
	}
	return nil
}

// gpuShare returns the shared device whose replicas gpu.replicas and
// gpu.sharing-strategy describe: the first advertised as nvidia.com/gpu,
// else the first of a kind nvidia.com/gpu advertises (a whole GPU, or a
// MIG device under single) advertised under its entry's resource, as GPU
// feature discovery labels a renamed nvidia.com/gpu; nil when none is. A
// MIG device's replicas under mixed are its profile's, mig-<profile>.*.
func gpuShare(shared []*offer.Share, k config.Kubernetes) *offer.Share {
	var renamed *offer.Share
	for _, s := range shared {
		switch {
		case s.MIG != nil && k.MIGStrategy != config.MIGSingle:
			// nvidia.com/mig-<profile>'s under mixed; not advertised under none.
		case asGPU(s, k):
			return s
		case renamed == nil:
			renamed = s
		}
	}
	return renamed
}

// asGPU reports whether a share's replicas are advertised as
// nvidia.com/gpu (or its .shared rename): whole GPUs' replicas, and MIG
// devices' under the single strategy, unless the entry names a resource.
func asGPU(s *offer.Share, k config.Kubernetes) bool {
	return s.Resource == "" && (s.MIG == nil || k.MIGStrategy == config.MIGSingle)
}

// migName is a MIG profile as its resource names it (offer's
// nvidia.com/mig-<profile>): "1g.10gb+me" is "1g.10gb.me", as NVIDIA's
// plugin and GPU feature discovery name it. No label key or value may
// hold a '+'.
func migName(profile string) string {
	return strings.ReplaceAll(profile, "+", ".")
}

// product turns a GPU's name, and the parts that follow it, into a label
// value: "NVIDIA A100-SXM4-40GB" gives "NVIDIA-A100-SXM4-40GB"; with "MIG"
// and "1g.5gb", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb". A value holds at most
// 63 characters: a longer one loses the end of the name, never the parts
// that tell MIG devices and replicas apart.
func product(name string, parts ...string) string {
	var tail string
	for _, p := range parts {
		tail += "-" + sanitize(p)
	}
	v := sanitize(strings.ReplaceAll(strings.TrimSpace(name), " ", "-"))
	if room := 63 - len(tail); len(v) > room {
		v = strings.TrimRight(v[:room], "-_.")
	}
	if v == "" {
		return strings.TrimPrefix(tail, "-")
	}
	return v + tail
}

// sanitize keeps what a label value may hold (letters, digits, '-', '_',
// '.'), at most 63 characters, starting and ending alphanumeric.
func sanitize(v string) string {
	b := []byte(v)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	v = string(b)
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.Trim(v, "-_.")
}

func computeCapability(cc string) (major, minor int) {
	a, b, _ := strings.Cut(cc, ".")
	major, _ = strconv.Atoi(a)
	minor, _ = strconv.Atoi(b)
	return major, minor
}

// migCapable reports whether the host has a GPU that can run in MIG mode:
// one that is in MIG mode, or a model that supports it (the host model
// does not record the capability of a GPU with MIG disabled).
func migCapable(h *inventory.Host) bool {
	for _, g := range h.GPUs {
		if g.MIGEnabled {
			return true
		}
		fields := strings.FieldsFunc(g.Name, func(r rune) bool { return r == ' ' || r == '-' })
		for _, m := range []string{"A100", "A800", "A30", "H100", "H200", "H800", "H20", "B200", "B300", "GH200", "GB200", "GB300"} {
			if slices.Contains(fields, m) {
				return true
			}
		}
		// The RTX PRO 6000 Blackwell editions run up to 4 MIG devices.
		if strings.Contains(g.Name, "RTX PRO 6000 Blackwell") {
			return true
		}
	}
	return false
}

// driverLabels adds the driver's version (cuda.driver-version.*,
// "580.65.06") and the CUDA version it supports (cuda.runtime-version.*,
// "13.0"), and the deprecated cuda.driver.* and cuda.runtime.* GPU feature
// discovery still writes beside them.
func driverLabels(l Labels, h *inventory.Host) error {
	parts := strings.Split(h.DriverVersion, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("driver version %q is not MAJOR.MINOR[.REV]", h.DriverVersion)
	}
	rev := ""
	if len(parts) > 2 {
		rev = sanitize(parts[2])
	}
	l["cuda.driver.major"], l["cuda.driver.minor"], l["cuda.driver.rev"] = sanitize(parts[0]), sanitize(parts[1]), rev
	l["cuda.driver-version.major"], l["cuda.driver-version.minor"], l["cuda.driver-version.revision"] = l["cuda.driver.major"], l["cuda.driver.minor"], rev
	l["cuda.driver-version.full"] = sanitize(h.DriverVersion)
	if h.CUDAVersion != "" {
		a, b, _ := strings.Cut(h.CUDAVersion, ".")
		l["cuda.runtime.major"], l["cuda.runtime.minor"] = sanitize(a), sanitize(b)
		l["cuda.runtime-version.major"], l["cuda.runtime-version.minor"] = sanitize(a), sanitize(b)
		l["cuda.runtime-version.full"] = sanitize(a) + "." + sanitize(b)
	}
	return nil
}

// machine is gpu.machine as GPU feature discovery writes it: the product
// name with characters other than letters, digits, '-', '_', '.' and
// spaces dropped, runs of spaces as one '-'; "unknown" when not known.
func machine(name string) string {
	v := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_. ", r) {
			return r
		}
		return -1
	}, name)
	if v = sanitize(strings.Join(strings.Fields(v), "-")); v == "" {
		return "unknown"
	}
	return v
}

// PCI class codes of a GPU in compute and in graphics (display) mode.
const (
	classCompute  = 0x030200 // 3D controller
	classGraphics = 0x030000 // VGA compatible controller
)

// mode is gpu.mode as GPU feature discovery has it: "compute" or
// "graphics" when every GPU is in that mode, else (or when a class is
// unknown) "unknown".
func mode(h *inventory.Host) string {
	class := h.GPUs[0].PCIClass
	for _, g := range h.GPUs {
		if g.PCIClass != class {
			return "unknown"
		}
	}
	switch class {
	case classCompute:
		return "compute"
	case classGraphics:
		return "graphics"
	}
	return "unknown"
}

// clique is gpu.clique as GPU feature discovery has it: the NVLink
// fabric's "<cluster UUID>.<clique ID>" when the GPUs attached to one all
// name the same; "" when none is attached, or they differ.
func clique(h *inventory.Host) string {
	var c string
	for _, g := range h.GPUs {
		switch {
		case g.Clique == "":
		case c == "":
			c = g.Clique
		case g.Clique != c:
			return ""
		}
	}
	return sanitize(c)
}

// sliceCounts returns a MIG profile's GPU instance and compute instance
// slices: "3g.20gb" is 3 and 3, "1c.3g.20gb" is 3 and 1.
func sliceCounts(profile string) (gi, ci int) {
	for _, f := range strings.Split(profile, ".") {
		if n, ok := strings.CutSuffix(f, "g"); ok {
			gi, _ = strconv.Atoi(n)
		}
		if n, ok := strings.CutSuffix(f, "c"); ok {
			ci, _ = strconv.Atoi(n)
		}
	}
	if ci == 0 {
		ci = gi
	}
	return gi, ci
}

// Lines returns the labels as sorted key=value lines.
func (l Labels) Lines() []byte {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + l[k] + "\n")
	}
	return []byte(b.String())
}

// FeatureFile is the name of the Node Feature Discovery local feature
// file gpuctk writes in features.d.
const FeatureFile = "gpuctk"

// Write writes the labels as a Node Feature Discovery local feature file,
// DIR/gpuctk, atomically: NFD's local source reads every file in
// /etc/kubernetes/node-feature-discovery/features.d and publishes its
// key=value lines as node labels.
func (l Labels) Write(dir string) (string, error) {
	p := filepath.Join(dir, FeatureFile)
	// NFD may not be installed yet: its folder is made as it would be.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("labels: %w", err)
	}
	data := append([]byte("# Written by gpuctk labels: NVIDIA GPU labels for Node Feature Discovery.\n"), l.Lines()...)
	// The feature file's name is gpuctk's own in NFD's folder: whatever
	// else appeared there (a FIFO, a link, a folder) is replaced, never
	// followed.
	if _, err := atomicfile.Reclaim(p, data, 0o644); err != nil {
		return "", fmt.Errorf("labels: %w", err)
	}
	return p, nil
}
