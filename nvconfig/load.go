package nvconfig

import (
	"errors"
	"fmt"
	"io/fs"

	"go.yaml.in/yaml/v3"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/internal/readfile"
)

// Load reads a configuration file that holds either gpuctk's config.toml
// or one NVIDIA device plugin config (version: v1), converted as Convert
// converts it, with its warnings: a ConfigMap moved from NVIDIA's plugin
// runs as it is. explicit is config.Load's: a missing file is an error
// only then.
func Load(path string, explicit bool) (*config.Config, []string, error) {
	return load(path, explicit, readfile.Limited, config.Load)
}

// LoadWatched is Load for a daemon's configuration, which may be swapped
// under it while it runs (the device plugin's): a FIFO, a device or a
// folder there is refused at once instead of read (config.LoadWatched).
func LoadWatched(path string, explicit bool) (*config.Config, []string, error) {
	return load(path, explicit, readfile.Regular, config.LoadWatched)
}

func load(path string, explicit bool, read func(string, int64) ([]byte, error), loadTOML func(string, bool) (*config.Config, error)) (*config.Config, []string, error) {
	// config.toml's bound: a TOML config between NVIDIA's and it loads.
	data, err := read(path, config.MaxFileSize)
	if err == nil && IsConfigMap(data) {
		return nil, nil, fmt.Errorf("config %s: a ConfigMap: mount it as a folder (--config-dir), or give one of its configs", path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cfg, err := loadTOML(path, explicit) // the defaults, when allowed
		return cfg, nil, err
	case err != nil:
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	case !isNVIDIA(data):
		// Parsed from the bytes read, not read again: a FIFO such as a
		// shell's <(...) gives its content once.
		cfg, err := config.Parse(data)
		if err != nil {
			return nil, nil, fmt.Errorf("config %s: %w", path, err)
		}
		cfg.Path = path
		return cfg, nil, nil
	}
	outs, err := Convert(data, path)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: an NVIDIA device plugin config gpuctk cannot run: %w", path, err)
	}
	cfg, err := config.Parse(outs[0].TOML)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: converted from NVIDIA's: %w", path, err)
	}
	cfg.Path = path
	return cfg, outs[0].Warnings, nil
}

// isNVIDIA reports whether data is an NVIDIA device plugin config: a YAML
// or JSON mapping with a version key, which no config.toml is.
func isNVIDIA(data []byte) bool {
	var doc map[string]any
	if yaml.Unmarshal(data, &doc) != nil {
		return false
	}
	_, ok := doc["version"]
	return ok
}

// IsConfigMap reports whether data is a Kubernetes ConfigMap (of NVIDIA's
// configs, one per key).
func IsConfigMap(data []byte) bool {
	root, err := parse(data)
	return err == nil && isConfigMap(root)
}
