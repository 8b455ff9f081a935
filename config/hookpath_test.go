package config

import (
	"strings"
	"testing"
)

// The spec's hooks carry hook-path as it is, and the OCI runtime spec
// wants a hook's path absolute: a relative one must be refused where the
// file, or a flag, gives it, not surface as containers that fail to start.
func TestHookPathAbsolute(t *testing.T) {
	if _, err := Parse([]byte("[cdi]\nhook-path = \"gpuctk-hook\"\n")); err == nil || !strings.Contains(err.Error(), `"hook-path" "gpuctk-hook" is not an absolute path`) {
		t.Errorf("Parse of a relative hook-path: %v, want an error naming it", err)
	}
	c := Default()
	if err := c.Override(map[string]string{"hook-path": "bin/gpuctk-hook"}); err == nil || !strings.Contains(err.Error(), "hook-path") {
		t.Errorf("--hook-path bin/gpuctk-hook: %v, want an error naming it", err)
	}
	if err := Default().Override(map[string]string{"hook-path": "/opt/gpuctk/gpuctk-hook"}); err != nil {
		t.Error(err)
	}
}
