package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// shippedPath is the default configuration the packages install as
// /etc/gpuctk/config.toml.
const shippedPath = "../packaging/config.toml"

// uncomment turns the shipped file's commented-out settings ("#key = ...",
// "#[section]") into settings, leaving prose ("# text") alone.
func uncomment(data []byte) []byte {
	return regexp.MustCompile(`(?m)^#([\[a-z])`).ReplaceAll(data, []byte("$1"))
}

// TestShippedConfig checks the packaged config.toml: as shipped, every
// setting commented out, it is the default configuration; with every
// setting uncommented, the values it shows are the defaults and its
// sharing examples are valid (package offer checks they fit dgx-a100).
func TestShippedConfig(t *testing.T) {
	data, err := os.ReadFile(shippedPath)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", shippedPath, err)
	}
	if !reflect.DeepEqual(shipped, Default()) {
		t.Errorf("%s as shipped is not the default configuration:\n got:\n%s\nwant:\n%s", shippedPath, asTOML(t, shipped), asTOML(t, Default()))
	}

	all, err := Parse(uncomment(data))
	if err != nil {
		t.Fatalf("%s with every setting uncommented: %v", shippedPath, err)
	}
	want := Default()
	want.Sharing = all.Sharing
	if !reflect.DeepEqual(all, want) {
		t.Errorf("%s shows values that are not the defaults:\n got:\n%s\nwant:\n%s", shippedPath, asTOML(t, all), asTOML(t, want))
	}
	if got := []string{all.Sharing[0].Strategy, all.Sharing[1].Strategy}; len(all.Sharing) != 2 || !slices.Equal(got, []string{TimeSlicing, MPS}) {
		t.Errorf("sharing examples: got %+v, want one time-slicing and one MPS entry", all.Sharing)
	}
}

func asTOML(t *testing.T, c *Config) string {
	t.Helper()
	b, err := toml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestShippedConfigDocumentsEveryKey checks that every key Parse accepts
// appears in the shipped file, so a new key cannot go undocumented.
func TestShippedConfigDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile(shippedPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if key == "" || key == "-" {
				continue
			}
			ft := f.Type
			switch {
			case ft.Kind() == reflect.Struct:
				if !strings.Contains(text, "\n#["+key+"]\n") {
					t.Errorf("%s does not show section [%s]", shippedPath, key)
				}
				walk(key+".", ft)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				if !strings.Contains(text, "\n#[["+key+"]]\n") {
					t.Errorf("%s does not show [[%s]]", shippedPath, key)
				}
				walk(key+".", ft.Elem())
			default:
				if !strings.Contains(text, "\n#"+key+" = ") {
					t.Errorf("%s does not document %s%s", shippedPath, prefix, key)
				}
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
}
