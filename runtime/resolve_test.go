package runtime

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/internal/cdiresolve"
)

// libraryResolver is what `gpuctk cdi resolve` prints, in process.
var libraryResolver = cdiresolve.Entry

// TestBinaryLinksNoLibrary keeps the CDI library, and what its package
// init costs every container start, out of gpuctk-runtime, and with it
// what the driver's discovery links: debug/elf (DWARF, zlib, zstd) and
// crypto/sha256 (the FIPS module), whose init and page faults cost
// 0.1 ms a start.
func TestBinaryLinksNoLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/gpuctk-runtime").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	banned := []string{"tags.cncf.io/container-device-interface/pkg/cdi", "go.yaml.in/yaml", "gopkg.in/yaml", "regexp", "github.com/fsnotify/fsnotify",
		"debug/elf", "compress", "crypto", "github.com/gpuctk/gpuctk/driver"}
	for dep := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("gpuctk-runtime links %s", dep)
			}
		}
	}
}
