package jsonobj

// maxDepth is encoding/json's limit on nesting: deeper documents are not
// valid to it.
const maxDepth = 10000

// Valid reports whether data is one JSON value, as json.Valid does (the
// same documents, FuzzValid holds the two together), at several times its
// speed: encoding/json's scanner calls a function per byte, which made
// checking a 30 KiB config.json cost a container start 70 to 150 µs.
// Like json.Valid it takes bytes that are not UTF-8 inside strings.
func Valid(data []byte) bool {
	// open holds the '{' and '[' of the values being read.
	var open []byte
	i := skipSpace(data, 0)
	for {
		// A value starts at i.
		if i >= len(data) {
			return false
		}
		switch c := data[i]; c {
		case '{', '[':
			if len(open) == maxDepth {
				return false
			}
			open = append(open, c)
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == c+2 { // '}' or ']'
				open = open[:len(open)-1]
				i++
				break
			}
			if c == '{' {
				if i = key(data, i); i < 0 {
					return false
				}
			}
			continue
		case '"':
			if i = validString(data, i); i < 0 {
				return false
			}
		case 't':
			if i = literal(data, i, "true"); i < 0 {
				return false
			}
		case 'f':
			if i = literal(data, i, "false"); i < 0 {
				return false
			}
		case 'n':
			if i = literal(data, i, "null"); i < 0 {
				return false
			}
		default:
			if i = number(data, i); i < 0 {
				return false
			}
		}
		// The value ended: close what it ends, up to the next value.
		for {
			i = skipSpace(data, i)
			if len(open) == 0 {
				return i == len(data)
			}
			if i >= len(data) {
				return false
			}
			top := open[len(open)-1]
			if data[i] == top+2 {
				open = open[:len(open)-1]
				i++
				continue
			}
			if data[i] != ',' {
				return false
			}
			i = skipSpace(data, i+1)
			if top == '{' {
				if i = key(data, i); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// key reads an object's key and its colon at i, returning where the value
// starts, or -1.
func key(data []byte, i int) int {
	if i >= len(data) || data[i] != '"' {
		return -1
	}
	if i = validString(data, i); i < 0 {
		return -1
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return -1
	}
	return skipSpace(data, i+1)
}

// validString returns the index past the string at i, or -1: no control
// characters, and only JSON's escapes.
func validString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(data) {
				return -1
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(data) {
					return -1
				}
				for _, h := range data[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func literal(data []byte, i int, word string) int {
	if len(data)-i < len(word) || string(data[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// number returns the index past the number at i, or -1:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(data []byte, i int) int {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		i = digits(data, i)
	default:
		return -1
	}
	if i < len(data) && data[i] == '.' {
		j := digits(data, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(data, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(data []byte, i int) int {
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	return i
}
