package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// overrides are the settings a command-line flag can give over the file,
// by flag name; each flag also reads GPUCTK_<FLAG> from the environment
// (the command line declares that). Precedence is flag, else environment,
// else the file, else the default: the file and its defaults are read
// first, then Override applies what the command line was given.
var overrides = map[string]func(c *Config, v string){
	// Folders gpuctk reads: a relative one is taken from the working
	// folder, as a path given to any command is.
	"driver-root":      func(c *Config, v string) { c.CDI.DriverRoot = absolute(v) },
	"dev-root":         func(c *Config, v string) { c.CDI.DevRoot = absolute(v) },
	"host-driver-root": func(c *Config, v string) { c.CDI.HostDriverRoot = v },
	// nvidia-ctk's name for the flag, repeatable: each folder is taken
	// under the driver root, so it stays as given.
	"library-search-path": func(c *Config, v string) { c.CDI.LibrarySearchPaths = strings.Split(v, ",") },
	"hook-path":           func(c *Config, v string) { c.CDI.HookPath = v },
	"vendor":              func(c *Config, v string) { c.CDI.Vendor = v },
	"class":               func(c *Config, v string) { c.CDI.Class = v },
	"spec-dir":            func(c *Config, v string) { c.CDI.SpecDirs = strings.Split(v, ",") },
	"driver-store":        func(c *Config, v string) { c.CDI.DriverStore = absolute(v) },
	// nvidia-ctk's name for the flag.
	"device-name-strategy": func(c *Config, v string) { c.CDI.DeviceNames = strings.Split(v, ",") },
	"state-root":           func(c *Config, v string) { c.MPS.StateRoot = v },
	// Boolean flags: the command line has parsed the value already.
	"cuda-compat":                      func(c *Config, v string) { c.CDI.CUDACompat = boolValue(v) },
	"disable-device-node-modification": func(c *Config, v string) { c.CDI.DisableDeviceNodeModification = boolValue(v) },
	"driver-folder":                    func(c *Config, v string) { c.CDI.DriverFolder = boolValue(v) },
}

// absolute returns path made absolute from the working folder; "" stays.
func absolute(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path // validate says what is wrong with it
}

// boolValue is a boolean flag's value, which the command line parsed.
func boolValue(v string) *bool {
	b := v == "true"
	return &b
}

// Overridable reports whether a flag of that name sets a configuration key.
func Overridable(flag string) bool {
	_, ok := overrides[flag]
	return ok
}

// Override applies flag values (flag name -> value) over the configuration
// and checks the result as the file is checked, naming the flag on error.
func (c *Config) Override(values map[string]string) error {
	for flag, v := range values {
		set, ok := overrides[flag]
		if !ok {
			return fmt.Errorf("--%s does not set a configuration key", flag)
		}
		set(c, v)
	}
	if err := c.validate(); err != nil {
		return fmt.Errorf("%s with the command line's flags: %w", c.where(), err)
	}
	return nil
}
