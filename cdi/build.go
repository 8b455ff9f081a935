package cdi

import (
	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/offer"
)

// DefaultSpecName is the file `gpuctk cdi generate` and the device plugin
// write in a spec dir: one file, so no two specs define the same names.
const DefaultSpecName = "nvidia.yaml"

// Build returns the bytes of the spec the configuration describes, in
// format ("yaml" or "json"), and its kind. Every writer of the spec calls
// it, so the CLI and the device plugin write the same bytes.
func Build(set *offer.Set, f *driver.Files, cfg *config.Config, format string) ([]byte, string, Summary, error) {
	spec, sum, err := ForConfig(cfg).Generate(set, f)
	if err != nil {
		return nil, "", sum, err
	}
	data, err := Marshal(spec, format)
	return data, spec.Kind, sum, err
}
