// Package plural writes counts the way a sentence reads them: "1 GPU",
// "2 GPUs", "0 replicas".
package plural

import "strconv"

// Count returns n and noun, the noun with an s unless n is 1.
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
