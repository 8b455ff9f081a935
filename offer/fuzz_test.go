package offer

import (
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/inventory"
)

// FuzzResolve feeds arbitrary TOML to the config parser and, when it parses,
// resolves it against a host: neither may panic, and every error is one line.
func FuzzResolve(f *testing.F) {
	f.Add("[[sharing]]\ndevices = [\"0\", \"1g.10gb\"]\nstrategy = \"mps\"\nreplicas = 4\npinned-memory-limit = \"20GiB\"\n")
	f.Add("[cdi]\nvendor = \"x\"\n[mps]\nshm-size = 1024\n")
	f.Add("[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n[[sharing]]\ndevices=[\"mig-0\"]\n")
	p, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		f.Fatal(err)
	}
	host, _ := p.Host()
	f.Fuzz(func(t *testing.T, data string) {
		c, err := config.Parse([]byte(data))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		set, err := Resolve(host, c)
		if err != nil {
			return
		}
		for _, s := range set.Shared {
			if s.Replicas < 2 || s.IsMPS() && (s.ThreadPercentage < 1 || s.ThreadPercentage > 100) {
				t.Fatalf("accepted %+v", s)
			}
		}
	})
}
