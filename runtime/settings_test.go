package runtime

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
)

// The runtime reads its sections of the file itself; they must mean what
// package config says they mean.
func TestSettingsMatchConfig(t *testing.T) {
	if ConfigPath != config.DefaultPath {
		t.Errorf("ConfigPath = %s, config.DefaultPath = %s", ConfigPath, config.DefaultPath)
	}
	for name, file := range map[string]string{
		"defaults": "",
		"set": `
[cdi]
vendor = "example.com"
class = "accel"
spec-dirs = ["/srv/cdi"]
hook-path = "/opt/gpuctk/bin/gpuctk-hook"

[runtime]
runtimes = ["/opt/runc/runc"]
log-file = "/srv/log/gpuctk-runtime.log"
cache-dir = "/srv/cache"

[[sharing]]
devices = ["0"]
strategy = "time-slicing"
replicas = 2
`,
	} {
		t.Run(name, func(t *testing.T) {
			c, err := config.Parse([]byte(file))
			if err != nil {
				t.Fatal(err)
			}
			s, err := ParseSettings([]byte(file))
			if err != nil {
				t.Fatal(err)
			}
			if s.CDI.Vendor != c.CDI.Vendor || s.CDI.Class != c.CDI.Class || !reflect.DeepEqual(s.CDI.SpecDirs, c.CDI.SpecDirs) ||
				!reflect.DeepEqual(s.Runtime.Runtimes, c.Runtime.Runtimes) || s.Runtime.LogFile != c.Runtime.LogFile || s.Runtime.CacheDir != c.Runtime.CacheDir {
				t.Errorf("runtime settings %+v differ from config's %+v, %+v", s, c.CDI, c.Runtime)
			}
		})
	}
}

func TestParseSettingsBadInput(t *testing.T) {
	_, err := ParseSettings([]byte("[runtime]\nruntimes = \"runc\"\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2 column") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error = %v, want one line with the position", err)
	}
}
