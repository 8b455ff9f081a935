package cli

import (
	"github.com/gpuctk/gpuctk/cdi"
	"github.com/gpuctk/gpuctk/config"
)

// generatorOptions are spec options that come from other command groups
// (MPS replica edits).
func generatorOptions(cfg *config.Config) []cdi.Option { return nil }
