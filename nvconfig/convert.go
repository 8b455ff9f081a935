package nvconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Output is one converted config.
type Output struct {
	Key string // the ConfigMap data key it came from; empty for a plain config
	// TOML is the converted config; nil for a ConfigMap key left blank,
	// which is skipped (NVIDIA's Helm chart tolerates one: a "default"
	// key left empty beside the real configs).
	TOML []byte
	// Warnings are what the operator must know of the converted config
	// (or why the key was skipped), each a line naming the field.
	Warnings []string
}

// Read reads at most MaxSize bytes from r and converts them; source names
// the input in the output's header comment.
func Read(r io.Reader, source string) ([]Output, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, &FieldError{Msg: fmt.Sprintf("larger than %d KiB: not a device plugin config", MaxSize>>10)}
	}
	return Convert(data, source)
}

// Convert converts an NVIDIA device plugin config, or a ConfigMap whose
// data values are such configs (one Output per key, sorted by key).
func Convert(data []byte, source string) ([]Output, error) {
	root, err := parse(data)
	if err != nil {
		return nil, err
	}
	if !isConfigMap(root) {
		out, warnings, err := convertOne(data, root, source)
		if err != nil {
			return nil, err
		}
		return []Output{{TOML: out, Warnings: warnings}}, nil
	}
	var cm configMap
	if err := decodeStrict(data, root, &cm); err != nil {
		return nil, err
	}
	if cm.BinaryData.Kind != 0 {
		return nil, &FieldError{Path: "binaryData", Line: cm.BinaryData.Line, Msg: "configs must be text: move them under data"}
	}
	if len(cm.Data) == 0 {
		return nil, &FieldError{Path: "data", Msg: "the ConfigMap holds no configs"}
	}
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var outs []Output
	for _, k := range keys {
		if !configMapKey.MatchString(k) || k == "." || k == ".." {
			return nil, &FieldError{Path: "data", Msg: fmt.Sprintf("key %q is not a valid ConfigMap key (letters, digits, '-', '_', '.')", k)}
		}
		text := []byte(cm.Data[k])
		if len(bytes.TrimSpace(text)) == 0 {
			outs = append(outs, Output{Key: k, Warnings: []string{fmt.Sprintf("data.%s: empty: skipped, as NVIDIA's plugin skips it (a node whose label names it runs on the default config)", k)}})
			continue
		}
		out, warnings, err := func() ([]byte, []string, error) {
			r, err := parse(text)
			if err != nil {
				return nil, nil, err
			}
			return convertOne(text, r, fmt.Sprintf("%s, key %s", source, k))
		}()
		if err != nil {
			// Lines inside a data value do not match the file's lines.
			fe := &FieldError{Msg: err.Error()}
			if e, ok := err.(*FieldError); ok {
				fe = &FieldError{Path: e.Path, Msg: e.Msg}
			}
			fe.Path = strings.TrimSuffix("data."+k+"."+fe.Path, ".")
			return nil, fe
		}
		for i, w := range warnings {
			warnings[i] = "data." + k + "." + w
		}
		outs = append(outs, Output{Key: k, TOML: out, Warnings: warnings})
	}
	if !slices.ContainsFunc(outs, func(o Output) bool { return o.TOML != nil }) {
		return nil, &FieldError{Path: "data", Msg: "every key is empty: the ConfigMap holds no configs"}
	}
	return outs, nil
}

var configMapKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

func isConfigMap(root *yaml.Node) bool {
	if root.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "kind" {
			return root.Content[i+1].Value == "ConfigMap"
		}
	}
	return false
}

// converter holds one document's output as it is built.
type converter struct {
	mig      string
	notes    []string // settings carried as comments only
	warnings []string // what the operator must act on; also comments
	b        bytes.Buffer
}

func (c *converter) note(path, value, why string) {
	c.notes = append(c.notes, fmt.Sprintf("# %s = %s: %s", path, value, why))
}

func convertOne(data []byte, root *yaml.Node, source string) ([]byte, []string, error) {
	c := &converter{mig: "none"}
	out, err := c.convert(data, root, source)
	if fe, ok := err.(*FieldError); ok && fe.Line == 0 && fe.Path != "" {
		fe.Line = pathLine(root, fe.Path)
	}
	return out, c.warnings, err
}

func (c *converter) convert(data []byte, root *yaml.Node, source string) ([]byte, error) {
	if root.Kind != yaml.MappingNode {
		return nil, &FieldError{Line: root.Line, Msg: "want a mapping with version: v1 (an NVIDIA device plugin config)"}
	}
	var d document
	if err := decodeStrict(data, root, &d); err != nil {
		return nil, err
	}
	if d.Version != "v1" {
		msg := fmt.Sprintf("%q is not supported: want v1", d.Version)
		if d.Version == "" {
			msg = "missing: want v1 (NVIDIA's config format version)"
		}
		return nil, &FieldError{Path: "version", Line: pathLine(root, "version"), Msg: msg}
	}
	if d.Resources.Kind != 0 {
		return nil, &FieldError{Path: "resources", Line: d.Resources.Line,
			Msg: "custom resource names by pattern cannot be expressed: remove it and set rename per shared resource, or resource in gpuctk's [[sharing]]"}
	}
	if d.Imex.Kind != 0 {
		return nil, &FieldError{Path: "imex", Line: d.Imex.Line, Msg: "IMEX channels cannot be expressed in gpuctk: remove the section"}
	}
	var k kubernetes
	if err := c.flags(d.Flags, &k); err != nil {
		return nil, err
	}
	var entries []entry
	if s := d.Sharing; s != nil {
		ts, mps := s.TimeSlicing != nil && len(s.TimeSlicing.Resources) > 0, s.MPS != nil && len(s.MPS.Resources) > 0
		if ts && mps {
			return nil, &FieldError{Path: "sharing.timeSlicing", Line: pathLine(root, "sharing.timeSlicing"),
				Msg: "NVIDIA's plugin ignores time-slicing when mps has resources: remove one of the two"}
		}
		for _, st := range []struct {
			path, strategy string
			r              *replicated
		}{{"sharing.timeSlicing", "time-slicing", s.TimeSlicing}, {"sharing.mps", "mps", s.MPS}} {
			if st.r == nil || len(st.r.Resources) == 0 {
				continue
			}
			rename := st.r.RenameByDefault
			k.renameShared = &rename
			k.renameFrom = st.path + ".renameByDefault"
			fail := st.r.FailRequestsGreaterThanOne
			if st.strategy == "mps" && fail != nil && !*fail {
				// gpuctk refuses false for MPS: a container reaches one
				// MPS daemon, so two replicas are one's worth.
				c.warnings = append(c.warnings, st.path+".failRequestsGreaterThanOne: false cannot be expressed for MPS (a container reaches one MPS daemon): imported as true, so a pod asking for 2 or more replicas is refused")
				fail = nil
			}
			seen := map[string]bool{}
			for i, r := range st.r.Resources {
				if n := resourceName(r.Name); r.Name != "" && seen[n] {
					p := fmt.Sprintf("%s.resources[%d].name", st.path, i)
					return nil, &FieldError{Path: p, Line: pathLine(root, p),
						Msg: fmt.Sprintf("%s is listed twice: NVIDIA's plugin ignores devices, so both entries would share every device, their replicas overlapping: keep one", n)}
				}
				seen[resourceName(r.Name)] = true
				e, err := c.entry(root, fmt.Sprintf("%s.resources[%d]", st.path, i), st.strategy, r, fail, st.path, rename)
				if err != nil {
					return nil, err
				}
				entries = append(entries, e)
			}
		}
	}
	c.write(source, k, entries)
	return c.b.Bytes(), nil
}

// kubernetes is the [kubernetes] table of the output.
type kubernetes struct {
	listStrategy []string
	allocation   string
	renameShared *bool
	renameFrom   string
}

func (c *converter) flags(f *flags, k *kubernetes) error {
	if f == nil {
		return nil
	}
	if f.MigStrategy != nil {
		switch *f.MigStrategy {
		case "none", "single", "mixed":
			c.mig = *f.MigStrategy
		default:
			return &FieldError{Path: "flags.migStrategy", Msg: fmt.Sprintf("%q is not a MIG strategy: use none, single or mixed", *f.MigStrategy)}
		}
	}
	if f.GDRCopyEnabled != nil && *f.GDRCopyEnabled {
		return &FieldError{Path: "flags.gdrcopyEnabled", Msg: "gpuctk does not inject the GDRCopy device: remove it or set it to false"}
	}
	if f.GDSEnabled != nil && *f.GDSEnabled {
		return &FieldError{Path: "flags.gdsEnabled", Msg: "gpuctk does not inject GPUDirect Storage devices: remove it or set it to false"}
	}
	if f.MOFEDEnabled != nil && *f.MOFEDEnabled {
		return &FieldError{Path: "flags.mofedEnabled", Msg: "gpuctk does not inject MOFED devices: remove it or set it to false"}
	}
	if f.NvidiaDriverRoot != nil && *f.NvidiaDriverRoot != "/" {
		c.note("flags.nvidiaDriverRoot", strconv.Quote(*f.NvidiaDriverRoot), "mount this host folder at /driver-root in the DaemonSet (deployments/kubernetes)")
	}
	if f.NvidiaDevRoot != nil && *f.NvidiaDevRoot != "/" {
		c.note("flags.nvidiaDevRoot", strconv.Quote(*f.NvidiaDevRoot), "pass --dev-root to gpuctk-device-plugin")
	}
	if f.MPSRoot != nil {
		c.note("flags.mpsRoot", strconv.Quote(*f.MPSRoot), "gpuctk's MPS daemons keep their state under [mps] state-root")
	}
	for _, b := range []struct {
		path string
		v    *bool
	}{{"flags.failOnInitError", f.FailOnInitError}, {"flags.restartOnDeviceUnhealthy", f.RestartOnDeviceUnhealthy}, {"flags.useNodeFeatureAPI", f.UseNodeFeatureAPI}} {
		if b.v != nil {
			c.note(b.path, strconv.FormatBool(*b.v), "no gpuctk setting; left out")
		}
	}
	if f.DeviceDiscoveryStrategy != nil {
		c.note("flags.deviceDiscoveryStrategy", strconv.Quote(*f.DeviceDiscoveryStrategy), "gpuctk always discovers devices through NVML")
	}
	if f.GFD.Kind != 0 {
		c.note("flags.gfd", "{...}", "gpuctk writes node labels itself (gpuctk labels)")
	}
	p := f.Plugin
	if p == nil {
		return nil
	}
	if p.DeviceListStrategy.Kind != 0 {
		var list []string
		n := &p.DeviceListStrategy
		switch n.Kind {
		case yaml.ScalarNode:
			list = []string{n.Value}
		case yaml.SequenceNode:
			if err := n.Decode(&list); err != nil {
				return &FieldError{Path: "flags.plugin.deviceListStrategy", Line: n.Line, Msg: "want a string or a list of strings"}
			}
		default:
			return &FieldError{Path: "flags.plugin.deviceListStrategy", Line: n.Line, Msg: "want a string or a list of strings"}
		}
		for i, s := range list {
			switch s {
			case "envvar", "cdi-annotations", "cdi-cri":
			case "volume-mounts":
				return &FieldError{Path: fmt.Sprintf("flags.plugin.deviceListStrategy[%d]", i), Line: n.Line,
					Msg: `"volume-mounts" cannot be expressed: use "cdi-cri", "cdi-annotations" or "envvar"`}
			default:
				return &FieldError{Path: fmt.Sprintf("flags.plugin.deviceListStrategy[%d]", i), Line: n.Line,
					Msg: fmt.Sprintf(`%q is not a device list strategy: use "cdi-cri", "cdi-annotations" or "envvar"`, s)}
			}
		}
		k.listStrategy = list
		if slices.Contains(list, "envvar") {
			c.warnings = append(c.warnings, `flags.plugin.deviceListStrategy: "envvar" hands pods NVIDIA_VISIBLE_DEVICES with gpuctk's device names (0, mig-3, 0::1), which only gpuctk-runtime understands: run those pods with runtimeClassName: nvidia (deployments/kubernetes), or use "cdi-cri"`)
		}
	}
	if p.DeviceIDStrategy != nil {
		switch *p.DeviceIDStrategy {
		case "uuid", "index":
			c.note("flags.plugin.deviceIDStrategy", strconv.Quote(*p.DeviceIDStrategy), "gpuctk's plugin hands out the spec's CDI device names")
		default:
			return &FieldError{Path: "flags.plugin.deviceIDStrategy", Msg: fmt.Sprintf("%q is not a device ID strategy: use uuid or index", *p.DeviceIDStrategy)}
		}
	}
	if a := p.SharedDevicesAllocationPolicy; a != nil {
		if *a != "distributed" && *a != "packed" {
			return &FieldError{Path: "flags.plugin.sharedDevicesAllocationPolicy", Msg: fmt.Sprintf("%q is not an allocation policy: use distributed or packed", *a)}
		}
		k.allocation = *a
	}
	if p.PassDeviceSpecs != nil {
		c.note("flags.plugin.passDeviceSpecs", strconv.FormatBool(*p.PassDeviceSpecs), "device nodes come from the CDI spec")
	}
	for _, s := range []struct {
		path string
		v    *string
	}{{"flags.plugin.cdiAnnotationPrefix", p.CDIAnnotationPrefix}, {"flags.plugin.nvidiaCTKPath", p.NvidiaCTKPath}, {"flags.plugin.containerDriverRoot", p.ContainerDriverRoot}} {
		if s.v != nil {
			c.note(s.path, strconv.Quote(*s.v), "no gpuctk setting; left out")
		}
	}
	return nil
}

// entry is one [[sharing]] entry of the output.
type entry struct {
	from, strategy string
	devices        []string
	replicas       int
	resource       string
	failGreater    *bool
	failFrom       string
}

var (
	gpuIndex = regexp.MustCompile(`^[0-9]+$`)
	migIndex = regexp.MustCompile(`^[0-9]+:[0-9]+$`)
	uuidRef  = regexp.MustCompile(`^(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	// A MIG profile's resource part with attributes: 1g.5gb.me,
	// 1c.3g.20gb.me.all.
	migAttributes = regexp.MustCompile(`^((?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb)\.(.+)$`)
	// A DNS subdomain, as Kubernetes wants the name part of a resource.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// resourceName qualifies a name as NVIDIA's plugin does: "gpu" is
// "nvidia.com/gpu".
func resourceName(n string) string {
	if !strings.HasPrefix(n, "nvidia.com/") {
		return "nvidia.com/" + n
	}
	return n
}

func (c *converter) entry(root *yaml.Node, path, strategy string, r resource, fail *bool, failPath string, renameByDefault bool) (entry, error) {
	e := entry{from: path, strategy: strategy, failGreater: fail, failFrom: failPath + ".failRequestsGreaterThanOne"}
	errAt := func(field, msg string) error {
		return &FieldError{Path: path + "." + field, Line: pathLine(root, path+"."+field), Msg: msg}
	}
	if r.Name == "" {
		return e, errAt("name", "missing: name the resource to share (nvidia.com/gpu or nvidia.com/mig-<profile>)")
	}
	if r.Replicas == nil {
		return e, errAt("replicas", "missing: say how many replicas each device gets")
	}
	if *r.Replicas < 2 {
		return e, errAt("replicas", fmt.Sprintf("%d cannot be expressed: gpuctk shares a device in at least 2 replicas (remove the entry to leave the devices unshared)", *r.Replicas))
	}
	e.replicas = *r.Replicas
	name := resourceName(r.Name)
	var all []string
	switch {
	case name == "nvidia.com/gpu" && c.mig == "single":
		// Every MIG device, or on a node without MIG mode every GPU:
		// single allows one or the other.
		all = []string{"gpus", "mig"}
	case name == "nvidia.com/gpu" && c.mig == "none" && strategy == "time-slicing":
		// NVIDIA's plugin advertises a GPU in MIG mode whole under
		// "none", and replicates it as any other.
		all = []string{"all-gpus"}
	case name == "nvidia.com/gpu":
		// MPS cannot share a GPU in MIG mode whole: such a GPU goes out
		// whole, beside the replicas (gpuctk warns of the mix).
		all = []string{"gpus"}
	case strings.HasPrefix(name, "nvidia.com/mig-"):
		profile := strings.TrimPrefix(name, "nvidia.com/mig-")
		if c.mig != "mixed" {
			return e, errAt("name", fmt.Sprintf("%s is advertised only under migStrategy mixed, and flags.migStrategy is %s", name, c.mig))
		}
		if !dnsSubdomain.MatchString(profile) || !strings.Contains(profile, "g.") {
			return e, errAt("name", fmt.Sprintf("%q is not a MIG profile such as 1g.5gb", profile))
		}
		// gpuctk, as NVIDIA's plugin, names a profile with attributes
		// (1g.5gb+me) by its resource with '+' as '.': the selector is
		// the profile as NVML names it.
		if m := migAttributes.FindStringSubmatch(profile); m != nil {
			profile = m[1] + "+" + m[2]
		}
		all = []string{profile}
	default:
		return e, errAt("name", fmt.Sprintf("%s is not a resource NVIDIA's plugin advertises: use nvidia.com/gpu or nvidia.com/mig-<profile>", name))
	}
	// NVIDIA's plugin reads devices and rename, then ignores them
	// (DisableResourceNamingInConfig): every device of the resource is
	// shared, under the resource's name (or <name>.shared with
	// renameByDefault). The import does the same, so that pods asking for
	// what NVIDIA's plugin advertised still get it, and says so.
	devs, err := devices(&r.Devices, all, path+".devices")
	if err != nil {
		return e, err
	}
	e.devices = all
	if !slices.Equal(devs, all) {
		c.warnings = append(c.warnings, fmt.Sprintf(`%s.devices: NVIDIA's plugin ignores it and shares every device of %s: imported as %s; to share only some devices, list them in the [[sharing]] entry's "devices"`,
			path, name, quoteList(all)))
	}
	if r.Rename != "" {
		rn := resourceName(r.Rename)
		if !dnsSubdomain.MatchString(strings.TrimPrefix(rn, "nvidia.com/")) {
			return e, errAt("rename", fmt.Sprintf("%q is not a valid resource name: lower-case letters, digits, '-' and '.'", r.Rename))
		}
		if rn != name+".shared" || !renameByDefault {
			c.warnings = append(c.warnings, fmt.Sprintf(`%s.rename: NVIDIA's plugin ignores it (its replicas are %s, or %s.shared with renameByDefault): left out; to advertise them as %s, set resource = %s in the [[sharing]] entry`,
				path, name, name, rn, quote(rn)))
		}
	}
	return e, nil
}

// devices maps NVIDIA's devices field ("all" when absent, a list of
// indices, G:M indices and UUIDs) to gpuctk selectors.
func devices(n *yaml.Node, all []string, path string) ([]string, error) {
	if n.Kind == 0 {
		return all, nil
	}
	errAt := func(p string, line int, msg string) error { return &FieldError{Path: p, Line: line, Msg: msg} }
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Value == "all" {
			return all, nil
		}
		if _, err := strconv.Atoi(n.Value); err == nil && n.Tag == "!!int" {
			return []string{"count " + n.Value}, nil // ignored by NVIDIA's plugin, as a list is
		}
		return nil, errAt(path, n.Line, fmt.Sprintf("%q: want all or a list of GPU indices, G:M MIG indices or UUIDs", n.Value))
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			return nil, errAt(path, n.Line, "an empty list shares nothing: list devices or use all")
		}
		var out []string
		for i, c := range n.Content {
			v := c.Value
			if c.Kind != yaml.ScalarNode || !(gpuIndex.MatchString(v) || migIndex.MatchString(v) || uuidRef.MatchString(v)) {
				return nil, errAt(fmt.Sprintf("%s[%d]", path, i), c.Line, fmt.Sprintf("%q is not a GPU index, G:M MIG index or UUID", v))
			}
			if slices.Contains(out, v) {
				return nil, errAt(fmt.Sprintf("%s[%d]", path, i), c.Line, fmt.Sprintf("%q is listed twice", v))
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, errAt(path, n.Line, "want all or a list of GPU indices, G:M MIG indices or UUIDs")
}

// pathLine is the line of the field at a dotted path ("a.b[1].c"), 0
// where it is not found.
func pathLine(root *yaml.Node, path string) int {
	n, line := root, 0
	for _, part := range strings.Split(path, ".") {
		name, idx := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 {
			name = part[:i]
			idx, _ = strconv.Atoi(strings.TrimSuffix(part[i+1:], "]"))
		}
		if n.Kind != yaml.MappingNode {
			return 0
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == name {
				next, line = n.Content[i+1], n.Content[i].Line
			}
		}
		if next == nil {
			return 0
		}
		if idx >= 0 {
			if next.Kind != yaml.SequenceNode || idx >= len(next.Content) {
				return 0
			}
			next = next.Content[idx]
			line = next.Line
		}
		n = next
	}
	return line
}

func (c *converter) write(source string, k kubernetes, entries []entry) {
	b := &c.b
	fmt.Fprintf(b, "# gpuctk config.toml converted by `gpuctk config import-device-plugin`\n# from %s (an NVIDIA k8s-device-plugin config, version v1).\n", source)
	if len(c.notes) > 0 {
		b.WriteString("#\n# Settings with no gpuctk key, not carried over:\n")
		for _, n := range c.notes {
			b.WriteString(n + "\n")
		}
	}
	for _, w := range c.warnings {
		b.WriteString("# WARNING: " + w + "\n")
	}
	b.WriteString("\n[kubernetes]\n")
	b.WriteString("# flags.migStrategy (none when not set)\n")
	fmt.Fprintf(b, "mig-strategy = %s\n", quote(c.mig))
	if k.listStrategy != nil {
		b.WriteString("# flags.plugin.deviceListStrategy\n")
		fmt.Fprintf(b, "device-list-strategy = %s\n", quoteList(k.listStrategy))
	}
	if k.allocation != "" {
		fmt.Fprintf(b, "# flags.plugin.sharedDevicesAllocationPolicy\nallocation-policy = %s\n", quote(k.allocation))
	}
	if k.renameShared != nil {
		fmt.Fprintf(b, "# %s\nrename-shared = %t\n", k.renameFrom, *k.renameShared)
	}
	for _, e := range entries {
		fmt.Fprintf(b, "\n# %s\n[[sharing]]\n", e.from)
		fmt.Fprintf(b, "devices = %s\n", quoteList(e.devices))
		fmt.Fprintf(b, "strategy = %s\n", quote(e.strategy))
		fmt.Fprintf(b, "replicas = %d\n", e.replicas)
		if e.resource != "" {
			fmt.Fprintf(b, "resource = %s\n", quote(e.resource))
		}
		if e.failGreater != nil {
			fmt.Fprintf(b, "# %s\nfail-requests-greater-than-one = %t\n", e.failFrom, *e.failGreater)
		}
	}
}

// quote writes a TOML basic string: JSON's escapes are all valid TOML.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Format joins outputs as one stream: a plain config as is, a ConfigMap's
// configs each under a "# --- KEY" line, in key order.
func Format(outs []Output) []byte {
	var b bytes.Buffer
	for _, o := range outs {
		if o.TOML == nil {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		if o.Key != "" {
			b.WriteString("# --- " + o.Key + "\n")
		}
		b.Write(o.TOML)
	}
	return b.Bytes()
}
