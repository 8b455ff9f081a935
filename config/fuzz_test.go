package config

import (
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
)

// FuzzParse feeds arbitrary TOML to the config parser and, when it parses,
// resolves it against a host: neither may panic, and every error is one line.
func FuzzParse(f *testing.F) {
	f.Add("[[sharing]]\ndevices = [\"0\", \"1g.10gb\"]\nstrategy = \"mps\"\nreplicas = 4\npinned-memory-limit = \"20GiB\"\n")
	f.Add("[cdi]\nvendor = \"x\"\n[mps]\nshm-size = 1024\n")
	f.Add("[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n[[sharing]]\ndevices=[\"mig-0\"]\n")
	p, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		f.Fatal(err)
	}
	host, _ := p.Host()
	f.Fuzz(func(t *testing.T, data string) {
		c, err := Parse([]byte(data))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		shared, err := c.Resolve(host)
		if err != nil {
			return
		}
		for _, s := range shared {
			if s.Replicas < 2 || s.ThreadPercentage() < 1 || s.ThreadPercentage() > 100 {
				t.Fatalf("accepted %+v", s)
			}
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"20GiB", "1", "3 MiB", "18446744073709551615", "16EiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			return
		}
		b, _ := v.MarshalText()
		if w, err := ParseSize(string(b)); err != nil || w != v {
			t.Fatalf("%q -> %d -> %q -> %d, %v", s, v, b, w, err)
		}
	})
}
