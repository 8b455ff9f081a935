package config

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// decodeStrict is what Parse falls back on: go-toml's decoder.
func decodeStrict(data []byte) (Config, error) {
	var c Config
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&c)
	return c, err
}

// quickCase is a file decodeQuick takes (quick true) or leaves to
// go-toml's decoder.
type quickCase struct {
	name, data string
	quick      bool
}

var quickCases = []quickCase{
	{"empty", "", true},
	{"comments only", "# nothing\n\n  # set\n", true},
	{"runtime's", "[cdi]\nspec-dirs = [\"/run/cdi\"]\n[runtime]\nruntimes = [\"/bin/true\"]\nlog-file = \"/run/x.log\"\ncache-dir = \"/run/c\"\n", true},
	{"escapes", "[cdi]\nvendor = \"ex\\u00e4mple.com\\t\\\"q\\\"\"\nclass = 'C:\\path'\n", true},
	{"multiline strings", "[mig]\nconfig = \"\"\"\nall-1g.5gb\"\"\"\nconfig-file = '''\n/etc/x\n'''\n", true},
	{"quoted keys", "[\"cdi\"]\n\"vendor\" = \"example.com\"\n'class' = \"gpu\"\n", true},
	{"crlf", "[cdi]\r\nvendor = \"a\"\r\n", true},
	{"sizes", "[mps]\nshm-size = 1073741824\npipe-size = \"32MiB\"\n", true},
	{"empty lists", "[cdi]\nreplica-names = []\ndevice-names = [ ]\n", true},
	{"list with comments and a trailing comma", "[runtime]\nruntimes = [\n  \"runc\", # first\n  \"crun\",\n]\n", true},
	{"booleans", "[cdi]\ncuda-compat = false\ndriver-folder = true\n[kubernetes]\nrename-shared = true\n", true},
	{"sharing entries", "[[sharing]]\ndevices = [\"0\"]\nstrategy = \"mps\"\nreplicas = 4\npinned-memory-limit = 1024\n[cdi]\nvendor = \"a\"\n[[sharing]]\n[[sharing]]\nreplicas = 0\nfail-requests-greater-than-one = false\n", true},
	{"the same key in two sharing entries", "[[sharing]]\nreplicas = 2\n[[sharing]]\nreplicas = 3\n", true},

	{"unknown key", "[cdi]\nvendr = \"x\"\n", false},
	{"unknown section", "[cdis]\n", false},
	{"key before any section", "vendor = \"x\"\n", false},
	{"repeated key", "[cdi]\nvendor = \"a\"\nvendor = \"b\"\n", false},
	{"repeated key in one sharing entry", "[[sharing]]\nreplicas = 2\nreplicas = 3\n", false},
	{"repeated section", "[cdi]\n[mps]\n[cdi]\n", false},
	{"repeated section after sharing", "[cdi]\n[[sharing]]\n[cdi]\n", false},
	{"dotted key", "[cdi]\nvendor.x = \"a\"\n", false},
	{"dotted section", "[cdi.sub]\n", false},
	{"dotted key at the root", "cdi.vendor = \"a\"\n", false},
	{"inline table", "cdi = { vendor = \"a\" }\n", false},
	{"other case", "[cdi]\nVendor = \"a\"\n", false},
	{"sharing as a table", "[sharing]\n", false},
	{"cdi as an array of tables", "[[cdi]]\n", false},
	{"underscored integer", "[[sharing]]\nreplicas = 1_0\n", false},
	{"hex integer", "[[sharing]]\nreplicas = 0x10\n", false},
	{"negative integer", "[[sharing]]\nreplicas = -2\n", false},
	{"signed integer", "[[sharing]]\nreplicas = +2\n", false},
	{"leading zero", "[[sharing]]\nreplicas = 02\n", false},
	{"float for an integer", "[[sharing]]\nreplicas = 2.0\n", false},
	{"string for an integer", "[[sharing]]\nreplicas = \"2\"\n", false},
	{"string for a boolean", "[cdi]\ncuda-compat = \"true\"\n", false},
	{"string for a list", "[cdi]\nreplica-names = \"index\"\n", false},
	{"list of integers", "[runtime]\nruntimes = [1]\n", false},
	{"nested list", "[runtime]\nruntimes = [[\"runc\"]]\n", false},
	{"bad size", "[mps]\nshm-size = \"lots\"\n", false},
	{"huge size", "[mps]\nshm-size = 18446744073709551615\n", false},
	{"syntax error", "[[sharing]\n", false},
	{"date", "[cdi]\nvendor = 1979-05-27\n", false},
}

// TestDecodeQuick checks which files decodeQuick takes, and that what it
// takes decodes as go-toml's decoder decodes it.
func TestDecodeQuick(t *testing.T) {
	shipped, err := os.ReadFile(shippedPath)
	if err != nil {
		t.Fatal(err)
	}
	// The shipped file as installed, and with every key set
	// (TestShippedConfigDocumentsEveryKey holds it to every key).
	cases := append(slices.Clip(quickCases),
		quickCase{"shipped", string(shipped), true},
		quickCase{"shipped, every key set", string(uncomment(shipped)), true})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := decodeQuick([]byte(tc.data))
			if ok != tc.quick {
				t.Fatalf("decodeQuick took it: %v, want %v", ok, tc.quick)
			}
			if !ok {
				return
			}
			want, err := decodeStrict([]byte(tc.data))
			if err != nil {
				t.Fatalf("decodeQuick took a file go-toml refuses: %v", err)
			}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("decodeQuick gave\n%+v\ngo-toml gave\n%+v", c, want)
			}
		})
	}
}

// FuzzDecodeQuick holds decodeQuick to go-toml's decoder: whatever it
// takes, go-toml takes and decodes the same.
func FuzzDecodeQuick(f *testing.F) {
	for _, tc := range quickCases {
		f.Add([]byte(tc.data))
	}
	if shipped, err := os.ReadFile(shippedPath); err == nil {
		f.Add(uncomment(shipped))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, ok := decodeQuick(data)
		if !ok {
			return
		}
		want, err := decodeStrict(data)
		if err != nil {
			t.Fatalf("decodeQuick took %q, which go-toml refuses: %v", data, err)
		}
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("%q: decodeQuick gave\n%+v\ngo-toml gave\n%+v", data, c, want)
		}
	})
}
