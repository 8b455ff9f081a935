package mig

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/gpuctk/gpuctk/inventory"
)

// Config is a mig-parted config file: named layouts.
type Config struct {
	// Source names the file in errors ("embedded" for the built-in one).
	Source  string
	Layouts map[string][]Entry
}

// Entry is one item of a layout: the GPUs it selects and what they get.
type Entry struct {
	// Devices are GPU indices; nil means all.
	Devices []int
	// Filter are product names (as NVML reports them, "NVIDIA " optional)
	// and DeviceIDs PCI device ids (NVML's pciDeviceId, 0x20B010DE): the
	// entry selects a GPU that either names; both empty means any GPU.
	Filter     []string
	DeviceIDs  []uint32
	MIGEnabled bool
	// MIGDevices counts MIG devices by profile name.
	MIGDevices map[string]int
}

//go:embed configs/config-default.yaml
var embedded embed.FS

// EmbeddedSource is the Source of the built-in config.
const EmbeddedSource = "embedded config"

// maxConfigSize bounds what is read of a config file.
const maxConfigSize = 1 << 20

// LoadConfig reads the config file at path, or the built-in one when path
// is empty: NVIDIA's config-default.yaml, as the GPU operator mounts it for
// its MIG manager (see configs/README.md).
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		data, err := embedded.ReadFile("configs/config-default.yaml")
		if err != nil {
			return nil, err
		}
		return ParseConfig(EmbeddedSource, data)
	}
	// O_NONBLOCK: a FIFO must not hang the open; it is refused below.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("MIG config: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("MIG config %s: not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("MIG config %s: %w", path, err)
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("MIG config %s: larger than %d bytes", path, maxConfigSize)
	}
	return ParseConfig(path, data)
}

// file is the top level of a config file; layouts are decoded by hand so
// that errors can name the layout, the entry and the field.
type file struct {
	Version string               `yaml:"version"`
	Configs map[string]yaml.Node `yaml:"mig-configs"`
}

// ParseConfig decodes a config file strictly: unknown keys, wrong types
// and impossible entries are errors naming source, layout, entry and field.
func ParseConfig(source string, data []byte) (*Config, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("MIG config %s: empty file", source)
		}
		return nil, fmt.Errorf("MIG config %s: %s", source, oneLine(err))
	}
	if f.Version != "v1" {
		return nil, fmt.Errorf("MIG config %s: version is %q: only v1 is known", source, f.Version)
	}
	if len(f.Configs) == 0 {
		return nil, fmt.Errorf("MIG config %s: mig-configs is empty", source)
	}
	c := &Config{Source: source, Layouts: map[string][]Entry{}}
	for name, node := range f.Configs {
		entries, err := parseLayout(&node)
		if err != nil {
			return nil, fmt.Errorf("MIG config %s: config %q %w", source, name, err)
		}
		c.Layouts[name] = entries
	}
	return c, nil
}

func parseLayout(node *yaml.Node) ([]Entry, error) {
	node = deref(node)
	if node.Kind != yaml.SequenceNode || len(node.Content) == 0 {
		return nil, fmt.Errorf("(line %d): must be a non-empty list of entries", node.Line)
	}
	var out []Entry
	for i, n := range node.Content {
		e, err := parseEntry(deref(n))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func parseEntry(n *yaml.Node) (Entry, error) {
	var e Entry
	if n.Kind != yaml.MappingNode {
		return e, fmt.Errorf("line %d: must be a mapping with devices and mig-enabled", n.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if seen[k.Value] {
			// As yaml does for the layouts' names: the last one must not
			// win silently (devices: [0] then devices: all).
			return e, fmt.Errorf("line %d: field %s given twice", k.Line, k.Value)
		}
		var err error
		switch k.Value {
		case "devices":
			e.Devices, err = parseDevices(v)
		case "device-filter":
			e.Filter, e.DeviceIDs, err = parseFilter(v)
		case "mig-enabled":
			err = v.Decode(&e.MIGEnabled)
		case "mig-devices":
			err = parseMIGDevices(v, &e.MIGDevices)
		default:
			return e, fmt.Errorf("line %d: unknown field %q: known are devices, device-filter, mig-enabled, mig-devices", k.Line, k.Value)
		}
		if err != nil {
			msg := oneLine(err)
			// yaml's own errors name the line already.
			if _, rest, ok := strings.Cut(msg, fmt.Sprintf("line %d: ", v.Line)); ok {
				msg = rest
			}
			return e, fmt.Errorf("field %s: line %d: %s", k.Value, v.Line, msg)
		}
		seen[k.Value] = true
	}
	if !seen["devices"] {
		return e, fmt.Errorf("line %d: field devices is missing: use all or a list of GPU indices", n.Line)
	}
	if !seen["mig-enabled"] {
		return e, fmt.Errorf("line %d: field mig-enabled is missing", n.Line)
	}
	if !e.MIGEnabled && len(e.MIGDevices) > 0 {
		return e, fmt.Errorf("line %d: field mig-devices: MIG devices need mig-enabled: true", n.Line)
	}
	return e, nil
}

func parseDevices(v *yaml.Node) ([]int, error) {
	if v.Kind == yaml.ScalarNode && v.Value == "all" {
		return nil, nil
	}
	var idx []int
	if v.Kind != yaml.SequenceNode || v.Decode(&idx) != nil || len(idx) == 0 {
		return nil, fmt.Errorf("must be all or a non-empty list of GPU indices")
	}
	for _, i := range idx {
		if i < 0 {
			return nil, fmt.Errorf("GPU index %d is negative", i)
		}
	}
	return idx, nil
}

// parseFilter splits a device-filter into product names and PCI device
// ids. mig-parted reads every filter as a PCI device id (strconv base 0)
// and lets one it cannot parse match nothing; gpuctk takes product names
// as well, so a filter that starts with 0x (or is all digits) is an id,
// and must be 0x and eight hex digits: a typo is refused rather than left
// to match nothing.
func parseFilter(v *yaml.Node) (names []string, ids []uint32, err error) {
	var filters []string
	switch v.Kind {
	case yaml.ScalarNode:
		filters = []string{v.Value}
	case yaml.SequenceNode:
		if err := v.Decode(&filters); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, fmt.Errorf("must be a PCI device id, a product name or a list of them")
	}
	for _, f := range filters {
		if f == "" {
			return nil, nil, fmt.Errorf("empty product name")
		}
		if !strings.HasPrefix(strings.ToLower(f), "0x") && strings.Trim(f, "0123456789") != "" {
			names = append(names, f)
			continue
		}
		id, err := parseDeviceID(f)
		if err != nil {
			return nil, nil, err
		}
		ids = append(ids, id)
	}
	return names, ids, nil
}

// nvidiaVendor is NVIDIA's PCI vendor id, the low half of its GPUs' ids.
const nvidiaVendor = 0x10DE

// parseDeviceID reads a PCI device id as mig-parted writes it: 0x, the
// device id and the vendor id, eight hex digits in all, either case.
func parseDeviceID(f string) (uint32, error) {
	const how = "write the device and vendor ids as 0x and eight hex digits, such as 0x20B010DE"
	if dev, sub, ok := strings.Cut(f, ":"); ok {
		return 0, fmt.Errorf("%q: gpuctk does not match PCI subsystem ids (%q): drop it to select every %q GPU", f, sub, dev)
	}
	hex, ok := strings.CutPrefix(strings.ToLower(f), "0x")
	if !ok {
		return 0, fmt.Errorf("%q is not a PCI device id in hex: %s", f, how)
	}
	id, err := strconv.ParseUint(hex, 16, 32)
	if err != nil || len(hex) != 8 {
		return 0, fmt.Errorf("%q is not a PCI device id of eight hex digits: %s", f, how)
	}
	if id&0xFFFF != nvidiaVendor {
		return 0, fmt.Errorf("%q: vendor id %04X is not NVIDIA's (10DE): %s", f, id&0xFFFF, how)
	}
	return uint32(id), nil
}

func parseMIGDevices(v *yaml.Node, out *map[string]int) error {
	if v.Kind != yaml.MappingNode {
		return fmt.Errorf(`must map profile names to counts, such as {"1g.5gb": 7}`)
	}
	m := map[string]int{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, c := v.Content[i], deref(v.Content[i+1])
		n, err := strconv.Atoi(c.Value)
		if c.Kind != yaml.ScalarNode || err != nil || n < 0 {
			return fmt.Errorf("profile %s: count %q is not a whole number of at least 0", k.Value, c.Value)
		}
		if _, dup := m[k.Value]; dup {
			return fmt.Errorf("profile %s given twice", k.Value)
		}
		if n > 0 {
			m[k.Value] = n
		}
	}
	*out = m
	return nil
}

// deref follows YAML aliases (*name) to the node they name, as the YAML
// decoders of mig-parted do.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// oneLine flattens yaml's multi-line errors.
func oneLine(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.TrimPrefix(s, "unmarshal errors:\n")
	return strings.Join(strings.Fields(s), " ")
}

// Names lists the config's layout names, sorted.
func (c *Config) Names() []string {
	var n []string
	for k := range c.Layouts {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Layout returns the layout called name.
func (c *Config) Layout(name string) ([]Entry, error) {
	l, ok := c.Layouts[name]
	if !ok {
		return nil, fmt.Errorf("MIG config %s has no config %q: use one of %s", c.Source, name, strings.Join(c.Names(), ", "))
	}
	return l, nil
}

// matches reports whether the entry selects the GPU: by index, then by
// PCI device id or product name. As in mig-parted, an id selects every GPU
// with that device and vendor id, whatever its subsystem.
func (e *Entry) matches(g *inventory.GPU) bool {
	if e.Devices != nil && !slices.Contains(e.Devices, g.Index) {
		return false
	}
	if len(e.Filter) == 0 && len(e.DeviceIDs) == 0 {
		return true
	}
	if g.PCIDeviceID != 0 && slices.Contains(e.DeviceIDs, g.PCIDeviceID) {
		return true
	}
	short := strings.TrimPrefix(g.Name, "NVIDIA ")
	return slices.ContainsFunc(e.Filter, func(f string) bool {
		f = strings.TrimPrefix(f, "NVIDIA ")
		return strings.EqualFold(f, short)
	})
}
