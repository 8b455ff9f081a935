package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// ConfigPath is gpuctk's configuration file; ConfigEnv names the variable
// that points gpuctk-runtime at another one.
const (
	ConfigPath = "/etc/gpuctk/config.toml"
	ConfigEnv  = "GPUCTK_CONFIG"
)

// Settings are the parts of gpuctk's configuration file that the runtime
// reads. Package config reads the whole file, strictly, for gpuctk; the
// runtime cannot import it (config needs inventory, which links NVML), so it
// reads its own sections here and leaves the others to gpuctk. A test keeps
// the defaults and keys equal to package config's.
type Settings struct {
	CDI struct {
		Vendor   string   `toml:"vendor"`
		Class    string   `toml:"class"`
		SpecDirs []string `toml:"spec-dirs"`
	} `toml:"cdi"`
	Runtime struct {
		Runtimes []string `toml:"runtimes"`
		LogFile  string   `toml:"log-file"`
		CacheDir string   `toml:"cache-dir"`
	} `toml:"runtime"`
	// Path is the file the settings came from, "" for the defaults.
	Path string `toml:"-"`
}

// DefaultSettings returns the settings used when no file exists.
func DefaultSettings() *Settings {
	s := &Settings{}
	s.setDefaults()
	return s
}

func (s *Settings) setDefaults() {
	if s.CDI.Vendor == "" {
		s.CDI.Vendor = "nvidia.com"
	}
	if s.CDI.Class == "" {
		s.CDI.Class = "gpu"
	}
	if len(s.CDI.SpecDirs) == 0 {
		s.CDI.SpecDirs = []string{"/etc/cdi", "/var/run/cdi"}
	}
	if len(s.Runtime.Runtimes) == 0 {
		s.Runtime.Runtimes = []string{"runc", "crun"}
	}
	if s.Runtime.LogFile == "" {
		s.Runtime.LogFile = "/var/log/gpuctk-runtime.log"
	}
	if s.Runtime.CacheDir == "" {
		s.Runtime.CacheDir = "/run/gpuctk/runtime-cache"
	}
}

// LoadSettings reads the file named by $GPUCTK_CONFIG, which must exist,
// or else ConfigPath, which may be missing.
func LoadSettings() (*Settings, error) {
	path, explicit := os.Getenv(ConfigEnv), true
	if path == "" {
		path, explicit = ConfigPath, false
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return DefaultSettings(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	s, err := ParseSettings(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	s.Path = path
	return s, nil
}

// ParseSettings reads the runtime's settings from a configuration file.
func ParseSettings(data []byte) (*Settings, error) {
	var s Settings
	if err := toml.Unmarshal(data, &s); err != nil {
		var derr *toml.DecodeError
		if errors.As(err, &derr) {
			row, col := derr.Position()
			msg, rest, _ := strings.Cut(strings.TrimPrefix(derr.Error(), "toml: "), " into struct field")
			if i := strings.LastIndex(rest, " of type "); i >= 0 {
				msg += " into " + rest[i+len(" of type "):]
			}
			if key := derr.Key(); len(key) > 0 {
				msg = strings.Join(key, ".") + ": " + msg
			}
			return nil, fmt.Errorf("line %d column %d: %s", row, col, msg)
		}
		return nil, err
	}
	s.setDefaults()
	return &s, nil
}
