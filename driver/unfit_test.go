package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// TestDiscoverUnfitRootFiles puts, at the files discovery reads under a
// driver root, what must not hang it or run it out of memory: a FIFO with
// no writer, an endless device (a link to /dev/zero, a node like it) and
// a sparse file over the bound. Each is one error line naming the file
// and what it is, at once.
func TestDiscoverUnfitRootFiles(t *testing.T) {
	files := []struct {
		name, profile, file string
		migOnly             bool // the error comes when MIG nodes are asked for
	}{
		{"linker cache", "l40s", "etc/ld.so.cache", false},
		{"mig-minors", "h100", "proc/driver/nvidia-caps/mig-minors", true},
		{"MIG capability file", "h100", "proc/driver/nvidia/capabilities/gpu0/mig/gi7/access", true},
	}
	for _, f := range files {
		for _, u := range fakehost.Unfit {
			t.Run(f.name+"/"+u.Name, func(t *testing.T) {
				root, p := fakeRoot(t, f.profile)
				target := filepath.Join(root, f.file)
				os.MkdirAll(filepath.Dir(target), 0o755)
				if strings.HasPrefix(f.file, "proc/driver/nvidia/capabilities/") {
					// Read only where mig-minors is missing.
					os.Remove(filepath.Join(root, "proc/driver/nvidia-caps/mig-minors"))
				}
				os.Remove(target)
				if err := u.Make(target); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					files, err := Discover(root, root, p.DriverVersion)
					if err == nil && f.migOnly {
						_, err = files.MIGNodes(0, 7, 0)
					}
					done <- err
				}()
				select {
				case err := <-done:
					says := u.Says + ", not a regular file"
					if u.Says == "" {
						says = "too large"
					}
					if err == nil || !strings.Contains(err.Error(), target) || !strings.Contains(err.Error(), says) || strings.Contains(err.Error(), "\n") {
						t.Errorf("err = %v, want one line naming %s and saying %q", err, target, says)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("discovery with %s at %s still runs after 5 s", u.Name, f.file)
				}
			})
		}
	}
}
