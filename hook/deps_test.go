package hook

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinks keeps out of gpuctk-hook, which runs at every container
// start, the packages whose init and page faults cost its start most:
// net (the MPS check connects with plain system calls), debug/elf (the
// compat libraries' SONAME is read by a bounded reader), crypto and
// compress.
func TestBinaryLinks(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/gpuctk-hook").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	banned := []string{"net", "debug/elf", "compress", "crypto", "regexp", "github.com/gpuctk/gpuctk/driver"}
	for dep := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("gpuctk-hook links %s", dep)
			}
		}
	}
}
