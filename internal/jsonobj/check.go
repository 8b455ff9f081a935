package jsonobj

import "strconv"

// CheckKeys refuses a value, at any depth, holding an object with a
// repeated key (Fold: two keys encoding/json takes for the same field), as
// a *DuplicateKeyError whose path starts at path. Use it on a member about
// to be decoded with encoding/json. data must be valid JSON (a member of a
// parsed Object is).
func CheckKeys(data []byte, path string, m Match) error {
	var c checker
	c.match = m
	if _, err := c.value(data, skipSpace(data, 0)); err != nil {
		err.Path = join(path, err.Path)
		return err
	}
	return nil
}

type checker struct {
	match Match
	keys  []seenKey // scratch: the keys of the objects being checked
}

type seenKey struct{ norm, key string }

// smallObject is the member count up to which an object's keys are
// compared pairwise: no map to allocate for the objects of a config.json.
const smallObject = 16

// value checks the value at i and returns where it ends. The error's
// Path is relative to the value; callers prepend their part on the way
// out, so a valid document costs no path strings.
func (c *checker) value(data []byte, i int) (int, *DuplicateKeyError) {
	switch data[i] {
	case '{':
		return c.object(data, i)
	case '[':
		n := 0
		for i = skipSpace(data, i+1); data[i] != ']'; n++ {
			end, err := c.value(data, i)
			if err != nil {
				err.Path = "[" + strconv.Itoa(n) + "]" + dot(err.Path)
				return 0, err
			}
			i = skipSpace(data, end)
			if data[i] == ',' {
				i = skipSpace(data, i+1)
			}
		}
		return i + 1, nil
	}
	return valueEnd(data, i), nil
}

func (c *checker) object(data []byte, i int) (int, *DuplicateKeyError) {
	start := len(c.keys)
	defer func() { c.keys = c.keys[:start] }()
	var seen map[string]string // norm → key, once past smallObject
	for i = skipSpace(data, i+1); data[i] != '}'; {
		end := stringEnd(data, i)
		key := decodeKey(data[i:end])
		norm := key
		if c.match == Fold {
			norm = fold(key)
		}
		if seen == nil {
			for _, k := range c.keys[start:] {
				if k.norm == norm {
					return 0, &DuplicateKeyError{Key: k.key, Other: key}
				}
			}
			c.keys = append(c.keys, seenKey{norm, key})
			if len(c.keys)-start > smallObject {
				seen = make(map[string]string, 2*smallObject)
				for _, k := range c.keys[start:] {
					seen[k.norm] = k.key
				}
			}
		} else {
			if first, ok := seen[norm]; ok {
				return 0, &DuplicateKeyError{Key: first, Other: key}
			}
			seen[norm] = key
		}
		i = skipSpace(data, skipSpace(data, end)+1)
		end, err := c.value(data, i)
		if err != nil {
			err.Path = key + dot(err.Path)
			return 0, err
		}
		i = skipSpace(data, end)
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return i + 1, nil
}

func dot(path string) string {
	if path == "" || path[0] == '[' {
		return path
	}
	return "." + path
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + dot(b)
}
