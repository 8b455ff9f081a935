// Package pcibus turns the PCI bus ids NVML reports into the names the
// kernel gives the same devices under /sys/bus/pci/devices, which udev's
// /dev/dri/by-path links repeat.
package pcibus

import (
	"fmt"
	"strconv"
	"strings"
)

// Sysfs returns the kernel's name of the PCI device NVML calls id, and
// whether id is a PCI bus id at all. NVML prints the domain with 8 hex
// digits (00000000:07:00.0; the legacy form has 4, 0000:07:00.0) and in
// upper case; the kernel prints it with %04x, so with 4 digits at least
// and more when the domain needs them, as on hosts with VMD or many root
// complexes (NVML's 00010000:01:00.0 is the kernel's 10000:01:00.0), and
// in lower case. Anything else than DOMAIN:BUS:DEVICE.FUNCTION in hex
// (a path, an empty string) is not a bus id: it must never name a folder.
func Sysfs(id string) (string, bool) {
	dom, rest, ok := strings.Cut(strings.ToLower(id), ":")
	if !ok || len(dom) == 0 || len(dom) > 8 || len(rest) != len("00:00.0") ||
		rest[2] != ':' || rest[5] != '.' || !isHex(rest[:2]) || !isHex(rest[3:5]) ||
		rest[6] < '0' || rest[6] > '7' || !isHex(dom) {
		return "", false
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("%04x", d) + ":" + rest, true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
