package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/gpuctk/gpuctk/capability"
	"github.com/gpuctk/gpuctk/internal/readfile"
	"github.com/gpuctk/gpuctk/internal/tomlerr"
)

// DefaultPath is where the configuration file lives on a host.
const DefaultPath = "/etc/gpuctk/config.toml"

// Sharing strategies.
const (
	TimeSlicing = "time-slicing"
	MPS         = "mps"
)

// Styles of device name, the values [cdi] replica-names takes.
const (
	IndexNames  = "index"   // "0", "mig-3"
	UUIDNames   = "uuid"    // "GPU-<uuid>", "MIG-<uuid>"
	GPUMIGNames = "gpu:mig" // "4:0", MIG devices only
	// TypeIndexNames are nvidia-ctk's type-index names: "gpu0", "mig4:0".
	TypeIndexNames = "type-index"
)

// nameStyles are the values [cdi] device-names and replica-names take.
var nameStyles = []string{IndexNames, UUIDNames, GPUMIGNames, TypeIndexNames}

// MIG strategies of the device plugin, the values [kubernetes] mig-strategy takes.
const (
	MIGNone   = "none"   // a GPU in MIG mode is advertised whole
	MIGSingle = "single" // MIG devices as nvidia.com/gpu
	MIGMixed  = "mixed"  // MIG devices as nvidia.com/mig-<profile>
)

// How the device plugin tells the runtime which devices a container got,
// the values [kubernetes] device-list-strategy takes.
const (
	ListCDICRI         = "cdi-cri"
	ListCDIAnnotations = "cdi-annotations"
	ListEnvvar         = "envvar"
)

// Allocation policies of the device plugin's preferred allocation.
const (
	Distributed = "distributed" // replicas from the device with the fewest in use
	Packed      = "packed"      // replicas from the device with the most in use
)

// Config is the whole configuration file.
type Config struct {
	CDI     CDI       `toml:"cdi"`
	Sharing []Sharing `toml:"sharing"`
	MPS     MPSConfig `toml:"mps"`
	Runtime Runtime   `toml:"runtime"`
	// Kubernetes holds the device plugin's settings.
	Kubernetes Kubernetes `toml:"kubernetes"`
	// MIG holds the layout gpuctk-mig.service applies at boot.
	MIG MIGConfig `toml:"mig"`
	// DRA holds the DRA driver's settings.
	DRA DRA `toml:"dra"`
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
	DevRoot string `toml:"dev-root"`
	// HostDriverRoot is where the host has the driver root when gpuctk
	// sees it elsewhere (gpuctk in a container with the host's / at
	// /driver-root): the spec's mounts name host paths. Empty means the
	// driver root.
	HostDriverRoot string `toml:"host-driver-root"`
	// LibrarySearchPaths are folders under the driver root holding the
	// driver's libraries when no ld.so.cache lists them (GKE's
	// /home/kubernetes/bin/nvidia/lib64): searched after the root's linker
	// cache, before the usual folders; NVML's library is found there too.
	LibrarySearchPaths []string `toml:"library-search-paths"`
	SpecDirs           []string `toml:"spec-dirs"`
	// ReplicaNames are the styles of name (IndexNames, ...)
	// each replica of a shared device gets; whole devices get all their
	// names. Every name costs a runtime time to read at each container
	// start, so the default is the index-style name alone.
	ReplicaNames []string `toml:"replica-names"`
	// DeviceNames are the styles of name whole devices get, as
	// nvidia-ctk's --device-name-strategy chooses.
	DeviceNames []string `toml:"device-names"`
	// CUDACompat lets the hook put an image's CUDA forward-compatibility
	// libraries first, on hosts whose GPUs all support it.
	CUDACompat *bool `toml:"cuda-compat"`
	// DisableDeviceNodeModification has the hook cover the container's
	// /proc/driver/nvidia/params with a copy saying ModifyDeviceFiles: 0,
	// so the CUDA driver in a container creates no device nodes.
	DisableDeviceNodeModification *bool `toml:"disable-device-node-modification"`
	// DriverFolder has the spec mount the driver's files as one folder of
	// hard links per capability, made under the driver root, where each
	// file's usual path becomes a link the hook makes: a container start
	// then mounts one folder, not two dozen files. Where the folder cannot
	// be made, the files are mounted one by one as with false.
	DriverFolder *bool `toml:"driver-folder"`
	// DriverStore is where the driver folder is made when its hard links
	// cannot be made under the driver root (the driver on another file
	// system): copies, or clones where the file system shares blocks.
	// Where gpuctk sees it; the spec names it as it is when it is not
	// under the driver root, so gpuctk in a container needs the host's
	// folder mounted at the same path. Empty means the folder of the hard
	// links, /var/lib/gpuctk/driver under the driver root: a fake root's
	// own in tests, the host's with the default root.
	DriverStore string `toml:"driver-store"`
}

// Sharing is one [[sharing]] entry: devices offered as replicas.
type Sharing struct {
	Devices  []string `toml:"devices"`
	Strategy string   `toml:"strategy"`
	Replicas int      `toml:"replicas"`
	// ActiveThreadPercentage and PinnedMemoryLimit apply to MPS only;
	// zero means the default (100/replicas, device memory/replicas).
	ActiveThreadPercentage int  `toml:"active-thread-percentage"`
	PinnedMemoryLimit      Size `toml:"pinned-memory-limit"`
	// Resource is the Kubernetes resource the replicas are advertised as;
	// empty means the device's own resource ([kubernetes] decides).
	Resource string `toml:"resource"`
	// FailRequestsGreaterThanOne makes the device plugin refuse a pod
	// that asks for more than one replica of the resource; nil means the
	// strategy's default (false for time-slicing, true for MPS, which
	// cannot be false).
	FailRequestsGreaterThanOne *bool `toml:"fail-requests-greater-than-one"`
}

// FailsRequestsGreaterThanOne reports whether a request for more than one
// replica is refused: the entry's setting, else the strategy's default.
func (s *Sharing) FailsRequestsGreaterThanOne() bool {
	if s.FailRequestsGreaterThanOne != nil {
		return *s.FailRequestsGreaterThanOne
	}
	return s.Strategy == MPS
}

// MIGConfig chooses the MIG layout `gpuctk mig apply` uses when no -c is
// given: the boot unit's.
type MIGConfig struct {
	// Config is the layout's name, e.g. "all-1g.5gb"; empty leaves MIG
	// alone.
	Config string `toml:"config"`
	// ConfigFile is a mig-parted config file; empty means the built-in
	// layouts.
	ConfigFile string `toml:"config-file"`
}

// Kubernetes holds the settings of gpuctk-device-plugin.
type Kubernetes struct {
	MIGStrategy        string   `toml:"mig-strategy"`
	DeviceListStrategy []string `toml:"device-list-strategy"`
	AllocationPolicy   string   `toml:"allocation-policy"`
	// RenameShared advertises replicas as <resource>.shared.
	RenameShared bool `toml:"rename-shared"`
	// DriverCapabilities are what NVIDIA_DRIVER_CAPABILITIES names, for
	// every container given a device: compute and utility always, then
	// each capability device the spec has (graphics, video, ..., all).
	DriverCapabilities []string `toml:"driver-capabilities"`
}

// DRA holds the settings of gpuctk-dra, the Dynamic Resource Allocation
// driver.
type DRA struct {
	// DriverName is the driver's name in ResourceSlices, DeviceClasses
	// and claims' opaque configuration.
	DriverName string `toml:"driver-name"`
}

// validate checks the driver name is what the API takes: a DNS subdomain
// of at most 63 characters.
func (d *DRA) validate() error {
	n := d.DriverName
	ok := len(n) <= 63
	for _, part := range strings.Split(n, ".") {
		ok = ok && part != "" && part[0] != '-' && part[len(part)-1] != '-' &&
			strings.Trim(part, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
	}
	if !ok {
		return fmt.Errorf("driver-name %q is not a DNS subdomain of at most 63 characters (lower-case letters, digits, '-' and '.'): use a domain of yours such as gpu.example.com", n)
	}
	return nil
}

// MPSConfig holds the settings of the MPS control daemons.
type MPSConfig struct {
	StateRoot string `toml:"state-root"`
	ShmSize   Size   `toml:"shm-size"`
	// PipeSize caps each daemon's pipe folder, a tmpfs every replica
	// container writes to, so that a tenant cannot fill the host's /run.
	PipeSize Size `toml:"pipe-size"`
	// SetComputeMode puts an MPS-shared device's GPU in EXCLUSIVE_PROCESS
	// compute mode while its daemon runs.
	SetComputeMode *bool `toml:"set-compute-mode"`
	// StartTimeout is how long to wait for a daemon to answer, e.g. "10s".
	StartTimeout string `toml:"start-timeout"`
}

// Timeout returns StartTimeout as a duration (checked when the file is read).
func (m *MPSConfig) Timeout() time.Duration {
	d, _ := time.ParseDuration(m.StartTimeout)
	return d
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
	if c.CDI.LibrarySearchPaths == nil {
		c.CDI.LibrarySearchPaths = []string{} // none: an empty list is the same
	}
	// nil only: an empty list written in the file is an error.
	if c.CDI.ReplicaNames == nil {
		c.CDI.ReplicaNames = []string{IndexNames}
	}
	if c.CDI.DeviceNames == nil {
		c.CDI.DeviceNames = []string{IndexNames, GPUMIGNames, UUIDNames}
	}
	for _, b := range []**bool{&c.CDI.CUDACompat, &c.CDI.DisableDeviceNodeModification, &c.CDI.DriverFolder} {
		if *b == nil {
			t := true
			*b = &t
		}
	}
	setDefault(&c.DRA.DriverName, "gpu.gpuctk.io")
	setDefault(&c.MPS.StateRoot, "/run/gpuctk/mps")
	if c.MPS.ShmSize == 0 {
		c.MPS.ShmSize = 1 << 30
	}
	if c.MPS.PipeSize == 0 {
		c.MPS.PipeSize = 16 << 20
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
	setDefault(&c.Kubernetes.MIGStrategy, MIGNone)
	if c.Kubernetes.DriverCapabilities == nil {
		c.Kubernetes.DriverCapabilities = []string{string(capability.Compute), string(capability.Utility)}
	}
	if c.Kubernetes.DeviceListStrategy == nil {
		c.Kubernetes.DeviceListStrategy = []string{ListCDICRI}
	}
	setDefault(&c.Kubernetes.AllocationPolicy, Distributed)
}

func setDefault(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

// IsHostState reports whether dir is one of the real host's own folders of
// state by default, [mps] state-root's or [runtime] cache-dir's: a run on
// a simulated host makes nothing there, where it would pass for the real
// host's (mount points, daemons, cache entries).
func IsHostState(dir string) bool {
	d := Default()
	dir = filepath.Clean(dir)
	return dir == d.MPS.StateRoot || dir == d.Runtime.CacheDir
}

// MaxFileSize bounds what Load reads: a config with every key and a
// thousand [[sharing]] entries is under 1 MiB.
const MaxFileSize = 4 << 20

// Load reads the file at path. A missing file at the default path gives
// the defaults; a missing file named explicitly is an error.
func Load(path string, explicit bool) (*Config, error) {
	return load(path, explicit, readfile.Limited)
}

// LoadWatched is Load for a daemon's configuration, which may be swapped
// under it while it runs (the device plugin's): a FIFO, a device or a
// folder there is refused at once instead of read, so that no read can
// hang the daemon.
func LoadWatched(path string, explicit bool) (*Config, error) {
	return load(path, explicit, readfile.Regular)
}

func load(path string, explicit bool, read func(string, int64) ([]byte, error)) (*Config, error) {
	data, err := read(path, MaxFileSize)
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
	c, ok := decodeQuick(data)
	if !ok {
		c = Config{}
		dec := toml.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, tomlerr.Line(err)
		}
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
	if err := c.MPS.validate(); err != nil {
		return fmt.Errorf("[mps] %w", err)
	}
	if err := c.Kubernetes.validate(); err != nil {
		return fmt.Errorf("[kubernetes] %w", err)
	}
	if err := c.Runtime.validate(); err != nil {
		return fmt.Errorf("[runtime] %w", err)
	}
	if err := c.DRA.validate(); err != nil {
		return fmt.Errorf("[dra] %w", err)
	}
	return nil
}

// validate checks the paths gpuctk-runtime uses: it runs in the bundle's
// folder, where a relative one would put its cache and log in every
// container's bundle.
func (r *Runtime) validate() error {
	for _, p := range []struct{ key, path string }{{"cache-dir", r.CacheDir}, {"log-file", r.LogFile}} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf(`%q %q is not an absolute path`, p.key, p.path)
		}
	}
	return nil
}

func (m *MPSConfig) validate() error {
	if !filepath.IsAbs(m.StateRoot) {
		return fmt.Errorf(`"state-root" %q is not an absolute path`, m.StateRoot)
	}
	if d, err := time.ParseDuration(m.StartTimeout); err != nil || d <= 0 {
		return fmt.Errorf(`"start-timeout" %q is not a duration such as "10s"`, m.StartTimeout)
	}
	if m.ShmSize < 1<<20 {
		return fmt.Errorf(`"shm-size" is %d bytes: it must be at least 1MiB`, uint64(m.ShmSize))
	}
	if m.PipeSize < 1<<20 || m.PipeSize > 1<<30 {
		return fmt.Errorf(`"pipe-size" is %d bytes: it must be from 1MiB to 1GiB`, uint64(m.PipeSize))
	}
	return nil
}

func (k *Kubernetes) validate() error {
	if err := oneOf("mig-strategy", k.MIGStrategy, MIGNone, MIGSingle, MIGMixed); err != nil {
		return err
	}
	if len(k.DeviceListStrategy) == 0 {
		return fmt.Errorf(`"device-list-strategy" is empty: list at least one of %q, %q, %q`, ListCDICRI, ListCDIAnnotations, ListEnvvar)
	}
	for _, s := range k.DeviceListStrategy {
		if err := oneOf("device-list-strategy", s, ListCDICRI, ListCDIAnnotations, ListEnvvar); err != nil {
			return err
		}
	}
	known := []string{string(capability.Compute), string(capability.Utility)}
	for _, c := range capability.Extra() {
		known = append(known, string(c))
	}
	for _, c := range k.DriverCapabilities {
		if err := oneOf("driver-capabilities", c, append(known, "all")...); err != nil {
			return err
		}
	}
	return oneOf("allocation-policy", k.AllocationPolicy, Distributed, Packed)
}

// oneOf checks that a key's value is one of the values it takes.
func oneOf(key, v string, values ...string) error {
	if slices.Contains(values, v) {
		return nil
	}
	quoted := make([]string, len(values))
	for i, x := range values {
		quoted[i] = strconv.Quote(x)
	}
	return fmt.Errorf("%q value %q is not known: use %s", key, v, strings.Join(quoted, ", "))
}

func (c *CDI) validate() error {
	// The spec names the hook by this path, which OCI runtimes take only
	// absolute (runc would look for it in each container's bundle).
	if !filepath.IsAbs(c.HookPath) {
		return fmt.Errorf(`"hook-path" %q is not an absolute path: give gpuctk-hook's full path, such as /usr/bin/gpuctk-hook`, c.HookPath)
	}
	// The spec names host paths under these roots, which runtimes resolve
	// from their own working folder: a relative root is refused here.
	for _, r := range []struct{ key, path string }{{"driver-root", c.DriverRoot}, {"dev-root", c.DevRoot}, {"host-driver-root", c.HostDriverRoot}, {"driver-store", c.DriverStore}} {
		if r.path != "" && !filepath.IsAbs(r.path) {
			return fmt.Errorf(`%q %q is not an absolute path: give the folder's full path, such as /run/nvidia/driver`, r.key, r.path)
		}
	}
	for _, p := range c.LibrarySearchPaths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf(`"library-search-paths" holds %q, not an absolute path: give each folder as the host has it, such as /home/kubernetes/bin/nvidia/lib64 (taken under the driver root)`, p)
		}
	}
	// The spec's kind is vendor/class: the spec's own validation parses
	// the kind back, and blames the wrong half when one holds a slash.
	if err := parser.ValidateVendorName(c.Vendor); err != nil {
		return fmt.Errorf(`"vendor" %q is not a CDI vendor name (%v): use a domain such as "nvidia.com"`, c.Vendor, err)
	}
	if err := parser.ValidateClassName(c.Class); err != nil {
		return fmt.Errorf(`"class" %q is not a CDI class name (%v): use letters, digits, '_' and '-', such as "gpu"`, c.Class, err)
	}
	for _, key := range []struct {
		name   string
		styles []string
	}{{"replica-names", c.ReplicaNames}, {"device-names", c.DeviceNames}} {
		use := `use "index", "uuid", "gpu:mig" or "type-index"`
		if len(key.styles) == 0 {
			return fmt.Errorf(`%q is empty: list at least one style of name (%s)`, key.name, use)
		}
		for _, n := range key.styles {
			if !slices.Contains(nameStyles, n) {
				return fmt.Errorf(`%q value %q is not known: %s`, key.name, n, use)
			}
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
	// Every MPS replica's edits bind its daemon's pipe folder at
	// /tmp/nvidia-mps: a container given replicas of two devices would
	// reach one daemon only, and CUDA would see one device. NVIDIA's
	// plugin refuses more than one MPS replica whatever the setting.
	if s.Strategy == MPS && s.FailRequestsGreaterThanOne != nil && !*s.FailRequestsGreaterThanOne {
		return fmt.Errorf(`"fail-requests-greater-than-one" = false cannot apply to strategy %q: a container reaches one MPS daemon only (every replica binds its daemon's pipe folder at /tmp/nvidia-mps), so the device plugin gives a container one MPS replica; remove the key`, MPS)
	}
	if s.ActiveThreadPercentage < 0 || s.ActiveThreadPercentage > 100 {
		return fmt.Errorf(`"active-thread-percentage" is %d: it must be from 1 to 100`, s.ActiveThreadPercentage)
	}
	if s.Resource != "" && !validResource(s.Resource) {
		return fmt.Errorf(`"resource" %q is not a Kubernetes extended resource name such as "nvidia.com/gpu-small"`, s.Resource)
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

// validResource reports whether r is a Kubernetes extended resource name:
// a DNS subdomain, a slash, and a name of at most 63 letters, digits, '-',
// '_' or '.', starting and ending with a letter or digit. (No regexp: the
// runtime reads this package at every container start.)
func validResource(r string) bool {
	prefix, name, ok := strings.Cut(r, "/")
	if !ok || len(prefix) == 0 || len(prefix) > 253 || len(name) == 0 || len(name) > 63 || strings.HasSuffix(prefix, "kubernetes.io") {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for _, part := range strings.Split(prefix, ".") {
		if part == "" || !alnum(part[0]) || !alnum(part[len(part)-1]) {
			return false
		}
		for i := 0; i < len(part); i++ {
			if !alnum(part[i]) && part[i] != '-' {
				return false
			}
		}
	}
	nameChar := func(c byte) bool { return alnum(c) || c >= 'A' && c <= 'Z' }
	if !nameChar(name[0]) || !nameChar(name[len(name)-1]) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !nameChar(name[i]) && !strings.ContainsRune("-_.", rune(name[i])) {
			return false
		}
	}
	return true
}

// where names the configuration in errors: "config FILE", or "config"
// for one built in code.
func (c *Config) where() string {
	if c.Path != "" {
		return "config " + c.Path
	}
	return "config"
}

// DevRootOrDriver returns where /dev and /proc are: dev-root, else the
// driver root.
func (c *CDI) DevRootOrDriver() string {
	if c.DevRoot != "" {
		return c.DevRoot
	}
	return c.DriverRoot
}
