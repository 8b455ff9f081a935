package runtime

import (
	"io"
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

// TestCappedBufferThroughCopy fills the capped buffer as exec.Cmd does,
// with io.Copy: the cap holds however the bytes come (a bytes.Buffer
// embedded gave io.Copy its ReadFrom, which read past the cap).
func TestCappedBufferThroughCopy(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
		over bool
	}{
		{"under", 1000, false},
		{"at the cap", 4096, false},
		{"over", 4097, true},
		{"far over", 64 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &cappedBuffer{max: 4096}
			n, err := io.Copy(b, io.LimitReader(zeros{}, tc.size))
			if err != nil || n != tc.size {
				t.Fatalf("io.Copy: %d, %v; want %d bytes taken", n, err, tc.size)
			}
			if want := min(tc.size, 4096); int64(b.buf.Len()) != want || b.over != tc.over {
				t.Errorf("kept %d bytes, over %v; want %d, %v", b.buf.Len(), b.over, want, tc.over)
			}
		})
	}
	var _ io.Writer = &cappedBuffer{}
	if _, ok := any(&cappedBuffer{}).(io.ReaderFrom); ok {
		t.Error("cappedBuffer has a ReadFrom: io.Copy would bypass its cap")
	}
}

// zeros is an endless reader that is not an io.WriterTo, as a pipe.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
