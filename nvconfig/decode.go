package nvconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxSize bounds what Read accepts: real configs are a few KiB.
const MaxSize = 1 << 20

// FieldError is a conversion error tied to a field of the input.
type FieldError struct {
	Path string // e.g. sharing.timeSlicing.resources[1].devices; empty for the whole document
	Line int    // 1-based line of the field in the input, 0 when unknown
	Msg  string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// document is NVIDIA's config, version v1. Fields are pointers or nodes
// where absence must be told apart from a zero value.
type document struct {
	Version   string    `yaml:"version"`
	Flags     *flags    `yaml:"flags"`
	Resources yaml.Node `yaml:"resources"`
	Sharing   *sharing  `yaml:"sharing"`
	Imex      yaml.Node `yaml:"imex"`
}

type flags struct {
	MigStrategy              *string      `yaml:"migStrategy"`
	FailOnInitError          *bool        `yaml:"failOnInitError"`
	RestartOnDeviceUnhealthy *bool        `yaml:"restartOnDeviceUnhealthy"`
	NvidiaDriverRoot         *string      `yaml:"nvidiaDriverRoot"`
	NvidiaDevRoot            *string      `yaml:"nvidiaDevRoot"`
	GDRCopyEnabled           *bool        `yaml:"gdrcopyEnabled"`
	GDSEnabled               *bool        `yaml:"gdsEnabled"`
	MOFEDEnabled             *bool        `yaml:"mofedEnabled"`
	MPSRoot                  *string      `yaml:"mpsRoot"`
	UseNodeFeatureAPI        *bool        `yaml:"useNodeFeatureAPI"`
	DeviceDiscoveryStrategy  *string      `yaml:"deviceDiscoveryStrategy"`
	Plugin                   *pluginFlags `yaml:"plugin"`
	GFD                      yaml.Node    `yaml:"gfd"`
}

type pluginFlags struct {
	PassDeviceSpecs     *bool     `yaml:"passDeviceSpecs"`
	DeviceListStrategy  yaml.Node `yaml:"deviceListStrategy"` // a string or a list of them
	DeviceIDStrategy    *string   `yaml:"deviceIDStrategy"`
	CDIAnnotationPrefix *string   `yaml:"cdiAnnotationPrefix"`
	NvidiaCTKPath       *string   `yaml:"nvidiaCTKPath"`
	ContainerDriverRoot *string   `yaml:"containerDriverRoot"`
	// SharedDevicesAllocationPolicy is distributed or packed.
	SharedDevicesAllocationPolicy *string `yaml:"sharedDevicesAllocationPolicy"`
}

type sharing struct {
	TimeSlicing *replicated `yaml:"timeSlicing"`
	MPS         *replicated `yaml:"mps"`
}

type replicated struct {
	RenameByDefault            bool       `yaml:"renameByDefault"`
	FailRequestsGreaterThanOne *bool      `yaml:"failRequestsGreaterThanOne"`
	Resources                  []resource `yaml:"resources"`
}

type resource struct {
	Name     string    `yaml:"name"`
	Rename   string    `yaml:"rename"`
	Devices  yaml.Node `yaml:"devices"` // "all", a count, or a list
	Replicas *int      `yaml:"replicas"`
}

type configMap struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   yaml.Node         `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	BinaryData yaml.Node         `yaml:"binaryData"`
	Immutable  *bool             `yaml:"immutable"`
}

// parse reads exactly one YAML (or JSON) document into a node tree.
func parse(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &FieldError{Msg: "empty: want an NVIDIA device plugin config (version: v1) or a ConfigMap of them"}
		}
		return nil, &FieldError{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &FieldError{Line: extra.Line, Msg: "a second YAML document: give one config or one ConfigMap per file"}
	}
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		return root.Content[0], nil
	}
	return &root, nil
}

// decodeStrict decodes data into v refusing unknown fields, and turns
// yaml's "line N: ..." messages into errors naming the field's path.
func decodeStrict(data []byte, root *yaml.Node, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return &FieldError{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	fe := typeError(root, te.Errors[0])
	if n := len(te.Errors) - 1; n > 0 {
		fe.Msg += fmt.Sprintf(" (and %d more)", n)
	}
	return fe
}

var (
	lineMsg      = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
)

func typeError(root *yaml.Node, msg string) *FieldError {
	m := lineMsg.FindStringSubmatch(msg)
	if m == nil {
		return &FieldError{Msg: msg}
	}
	line, _ := strconv.Atoi(m[1])
	fe := &FieldError{Line: line, Msg: m[2]}
	if u := unknownField.FindStringSubmatch(m[2]); u != nil {
		fe.Path = pathAt(root, line, u[1])
		fe.Msg = "unknown field: NVIDIA's config v1 has no such field (check its spelling and place)"
		return fe
	}
	fe.Path = pathAt(root, line, "")
	fe.Msg = strings.NewReplacer("!!str", "a string", "!!int", "a number", "!!seq", "a list", "!!map", "a mapping",
		"!!bool", "a boolean", "!!float", "a number").Replace(m[2])
	return fe
}

// pathAt finds the path of the mapping key named key (any key when key is
// empty) whose key or value sits on line; the last such key wins, as it
// is the innermost.
func pathAt(n *yaml.Node, line int, key string) string {
	found := ""
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := join(path, k.Value)
				if (k.Line == line || (key == "" && v.Line == line)) && (key == "" || k.Value == key) {
					found = p
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if key == "" && c.Line == line && c.Kind == yaml.ScalarNode {
					found = p
				}
				walk(c, p)
			}
		}
	}
	walk(n, "")
	return found
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
