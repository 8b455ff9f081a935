package config

import (
	"strings"
	"testing"
)

// The spec's kind is vendor/class: each must be a CDI name on its own,
// refused where the file or a flag gives it, naming that key. Before, the
// spec's validation blamed the other half ("nvidia.com/gpu" as the vendor
// gave `invalid class. invalid character '/' in name "gpu/gpu"`, an empty
// class "invalid vendor. empty name").
func TestKindNames(t *testing.T) {
	for _, tc := range []struct{ name, toml, flag, value, want string }{
		{name: "vendor holding the class", toml: "[cdi]\nvendor = \"nvidia.com/gpu\"\n", want: `[cdi] "vendor" "nvidia.com/gpu" is not a CDI vendor name`},
		{name: "class with a slash", toml: "[cdi]\nclass = \"gpu/mig\"\n", want: `[cdi] "class" "gpu/mig" is not a CDI class name`},
		{name: "--class empty", flag: "class", value: "", want: `[cdi] "class" "" is not a CDI class name`},
		{name: "--vendor with a space", flag: "vendor", value: "nvidia com", want: `[cdi] "vendor" "nvidia com" is not a CDI vendor name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.flag == "" {
				_, err = Parse([]byte(tc.toml))
			} else {
				err = Default().Override(map[string]string{tc.flag: tc.value})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Parse([]byte("[cdi]\nvendor = \"example.com\"\nclass = \"GPU_x-1\"\n")); err != nil {
		t.Errorf("a valid kind: %v", err)
	}
}
