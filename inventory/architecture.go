package inventory

import (
	"strconv"
	"strings"
)

// Architecture names a GPU architecture by its compute capability
// ("major.minor"), as GPU feature discovery does: "ampere" for "8.0",
// "undefined" for one it does not know.
func Architecture(computeCapability string) string {
	a, b, _ := strings.Cut(computeCapability, ".")
	major, _ := strconv.Atoi(a)
	minor, _ := strconv.Atoi(b)
	switch {
	case major == 1:
		return "tesla"
	case major == 2:
		return "fermi"
	case major == 3:
		return "kepler"
	case major == 5:
		return "maxwell"
	case major == 6:
		return "pascal"
	case major == 7 && minor < 5:
		return "volta"
	case major == 7:
		return "turing"
	case major == 8 && minor == 9:
		return "ada-lovelace"
	case major == 8:
		return "ampere"
	case major == 9:
		return "hopper"
	case major == 10 || major == 12:
		return "blackwell"
	}
	return "undefined"
}
