package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpuctk/gpuctk/inventory"
)

// DefaultPath is where the configuration file lives on a host.
const DefaultPath = "/etc/gpuctk/config.toml"

// Sharing strategies.
const (
	TimeSlicing = "time-slicing"
	MPS         = "mps"
)

// Config is the whole configuration file.
type Config struct {
	CDI     CDI       `toml:"cdi"`
	Sharing []Sharing `toml:"sharing"`
	MPS     MPSConfig `toml:"mps"`
	Runtime Runtime   `toml:"runtime"`
	// Path is the file the configuration was read from, "" for defaults.
	Path string `toml:"-"`
}

// CDI holds the settings of spec generation.
type CDI struct {
	Vendor     string `toml:"vendor"`
	Class      string `toml:"class"`
	HookPath   string `toml:"hook-path"`
	DriverRoot string `toml:"driver-root"`
	// DevRoot is where /dev and /proc are; empty means the driver root.
	DevRoot  string   `toml:"dev-root"`
	SpecDirs []string `toml:"spec-dirs"`
	// ReplicaNames are the styles of name (inventory.IndexStyle, ...)
	// each replica of a shared device gets; whole devices get all their
	// names. Every name costs a runtime time to read at each container
	// start, so the default is the index-style name alone.
	ReplicaNames []string `toml:"replica-names"`
}

// replicaNameStyles are the values [cdi] replica-names takes.
var replicaNameStyles = []string{inventory.IndexStyle, inventory.UUIDStyle, inventory.GPUMIGStyle}

// Sharing is one [[sharing]] entry: devices offered as replicas.
type Sharing struct {
	Devices  []string `toml:"devices"`
	Strategy string   `toml:"strategy"`
	Replicas int      `toml:"replicas"`
	// ActiveThreadPercentage and PinnedMemoryLimit apply to MPS only;
	// zero means the default (100/replicas, device memory/replicas).
	ActiveThreadPercentage int  `toml:"active-thread-percentage"`
	PinnedMemoryLimit      Size `toml:"pinned-memory-limit"`
}

// MPSConfig holds the settings of the MPS control daemons.
type MPSConfig struct {
	StateRoot string `toml:"state-root"`
	ShmSize   Size   `toml:"shm-size"`
	// SetComputeMode puts an MPS-shared device's GPU in EXCLUSIVE_PROCESS
	// compute mode while its daemon runs.
	SetComputeMode *bool `toml:"set-compute-mode"`
	// StartTimeout is how long to wait for a daemon to answer, e.g. "10s".
	StartTimeout string `toml:"start-timeout"`
}

// Runtime holds the settings of gpuctk-runtime.
type Runtime struct {
	// Runtimes are the low-level runtimes to exec, first found wins.
	Runtimes []string `toml:"runtimes"`
	LogFile  string   `toml:"log-file"`
	// CacheDir holds the devices' edits as resolved from the CDI specs,
	// so that a container start reads a small file, not every spec.
	CacheDir string `toml:"cache-dir"`
	// AcceptVisibleDevicesEnv takes device requests from the container's
	// NVIDIA_VISIBLE_DEVICES. The image sets that variable, so a cluster
	// that hands out devices only through its device plugin (annotations,
	// mounts) turns this off.
	AcceptVisibleDevicesEnv *bool `toml:"accept-visible-devices-env"`
}

// Default returns the configuration used when no file exists.
func Default() *Config {
	c := &Config{}
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	setDefault(&c.CDI.Vendor, "nvidia.com")
	setDefault(&c.CDI.Class, "gpu")
	setDefault(&c.CDI.HookPath, "/usr/bin/gpuctk-hook")
	setDefault(&c.CDI.DriverRoot, "/")
	if len(c.CDI.SpecDirs) == 0 {
		c.CDI.SpecDirs = []string{"/etc/cdi", "/var/run/cdi"}
	}
	// nil only: an empty list written in the file is an error.
	if c.CDI.ReplicaNames == nil {
		c.CDI.ReplicaNames = []string{inventory.IndexStyle}
	}
	setDefault(&c.MPS.StateRoot, "/run/gpuctk/mps")
	if c.MPS.ShmSize == 0 {
		c.MPS.ShmSize = 1 << 30
	}
	if c.MPS.SetComputeMode == nil {
		t := true
		c.MPS.SetComputeMode = &t
	}
	setDefault(&c.MPS.StartTimeout, "10s")
	if len(c.Runtime.Runtimes) == 0 {
		c.Runtime.Runtimes = []string{"runc", "crun"}
	}
	setDefault(&c.Runtime.LogFile, "/var/log/gpuctk-runtime.log")
	setDefault(&c.Runtime.CacheDir, "/run/gpuctk/runtime-cache")
	if c.Runtime.AcceptVisibleDevicesEnv == nil {
		t := true
		c.Runtime.AcceptVisibleDevicesEnv = &t
	}
}

func setDefault(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

// Load reads the file at path. A missing file at the default path gives
// the defaults; a missing file named explicitly is an error.
func Load(path string, explicit bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return Default(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// Parse reads a configuration from TOML and checks it.
func Parse(data []byte) (*Config, error) {
	var c Config
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, inventory.TOMLError(err)
	}
	c.setDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) validate() error {
	if err := c.CDI.validate(); err != nil {
		return fmt.Errorf("[cdi] %w", err)
	}
	for i, s := range c.Sharing {
		if err := s.validate(); err != nil {
			return fmt.Errorf("[[sharing]] entry %d: %w", i+1, err)
		}
	}
	return nil
}

func (c *CDI) validate() error {
	use := `use "index", "uuid" or "gpu:mig"`
	if len(c.ReplicaNames) == 0 {
		return errors.New(`"replica-names" is empty: list at least one style of name (` + use + ")")
	}
	for _, n := range c.ReplicaNames {
		if !slices.Contains(replicaNameStyles, n) {
			return fmt.Errorf(`"replica-names" value %q is not known: %s`, n, use)
		}
	}
	return nil
}

func (s *Sharing) validate() error {
	if len(s.Devices) == 0 {
		return errors.New(`"devices" is empty: list at least one device (index, UUID, mig-N, G:M, a MIG profile or "all")`)
	}
	for _, d := range s.Devices {
		if strings.TrimSpace(d) == "" {
			return errors.New(`"devices" holds an empty selector`)
		}
	}
	switch s.Strategy {
	case TimeSlicing, MPS:
	case "":
		return fmt.Errorf(`"strategy" is missing: use %q or %q`, TimeSlicing, MPS)
	default:
		return fmt.Errorf(`"strategy" %q is not known: use %q or %q`, s.Strategy, TimeSlicing, MPS)
	}
	if s.Replicas < 2 {
		return fmt.Errorf(`"replicas" is %d: a shared device needs at least 2 replicas`, s.Replicas)
	}
	if s.Strategy != MPS && (s.ActiveThreadPercentage != 0 || s.PinnedMemoryLimit != 0) {
		return fmt.Errorf(`"active-thread-percentage" and "pinned-memory-limit" apply only to strategy %q`, MPS)
	}
	if s.ActiveThreadPercentage < 0 || s.ActiveThreadPercentage > 100 {
		return fmt.Errorf(`"active-thread-percentage" is %d: it must be from 1 to 100`, s.ActiveThreadPercentage)
	}
	return nil
}

// Size is a byte count written in TOML as an integer of bytes or a string
// with a binary unit: "512MiB", "20GiB", "1024" (bytes).
type Size uint64

// MiB returns the size in whole MiB.
func (s Size) MiB() uint64 { return uint64(s) >> 20 }

// UnmarshalText parses a size with an optional unit.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes the size in the largest unit that divides it.
func (s Size) MarshalText() ([]byte, error) {
	v := uint64(s)
	for _, u := range []struct {
		name  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if v != 0 && v%(1<<u.shift) == 0 {
			return []byte(strconv.FormatUint(v>>u.shift, 10) + u.name), nil
		}
	}
	return []byte(strconv.FormatUint(v, 10)), nil
}

// ParseSize parses "20GiB", "512MiB", "64KiB", "1TiB", "G"/"M" short forms
// or a plain byte count.
func ParseSize(str string) (Size, error) {
	t := strings.TrimSpace(str)
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, shift = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.shift
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || (shift > 0 && n > (^uint64(0))>>shift) {
		return 0, fmt.Errorf("size %q is not valid: write a whole number with a unit such as 512MiB or 20GiB", str)
	}
	return Size(n << shift), nil
}
