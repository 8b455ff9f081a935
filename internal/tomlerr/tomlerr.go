// Package tomlerr turns go-toml's decoding errors into one line that names
// the position and, for an unknown key, the key: the form every gpuctk
// message about a TOML file (its config, profiles, engines' configs) takes.
package tomlerr

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Line rewrites a go-toml decoding error as one line: "line L column C:
// unknown key "a.b"" or "line L column C: key: what is wrong". Other
// errors are returned as they are.
func Line(err error) error {
	var serr *toml.StrictMissingError
	if errors.As(err, &serr) && len(serr.Errors) > 0 {
		e := serr.Errors[0]
		row, col := e.Position()
		return fmt.Errorf("line %d column %d: unknown key %q", row, col, strings.Join(e.Key(), "."))
	}
	var derr *toml.DecodeError
	if errors.As(err, &derr) {
		row, col := derr.Position()
		msg, rest, _ := strings.Cut(strings.TrimPrefix(derr.Error(), "toml: "), " into struct field")
		if i := strings.LastIndex(rest, " of type "); i >= 0 {
			msg += " into " + rest[i+len(" of type "):]
		}
		if key := derr.Key(); len(key) > 0 {
			msg = strings.Join(key, ".") + ": " + msg
		}
		return fmt.Errorf("line %d column %d: %s", row, col, msg)
	}
	return err
}
