package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuctk/gpuctk/internal/jsonobj"
)

// docker adds the runtime to daemon.json and turns on CDI, keeping every
// other key where it was.
func docker(o Options, uninstall bool) ([]Change, error) {
	old, err := readFile(o.Config)
	if err != nil {
		return nil, err
	}
	cfg, err := parseObject(old, "", jsonobj.Fold)
	if err != nil {
		return nil, fmt.Errorf("docker config %s: %w", o.Config, err)
	}
	runtimes, err := member(cfg, "runtimes", jsonobj.Exact)
	if err != nil {
		return nil, fmt.Errorf("docker config %s: %w", o.Config, err)
	}
	if uninstall {
		if old == nil {
			return nil, nil
		}
		// What the user had before configure, from the backup of the
		// file as it was then.
		var orig, origRuntimes *jsonobj.Object
		if bak, err := readFile(o.Config + BackupSuffix); err == nil {
			if orig, err = parseObject(bak, "", jsonobj.Fold); err == nil {
				origRuntimes, _ = member(orig, "runtimes", jsonobj.Exact)
			}
		}
		if rt, ok := origRuntimes.Get(o.Name); ok {
			runtimes.Set(o.Name, rt)
		} else {
			runtimes.Delete(o.Name)
		}
		if runtimes.Len() == 0 {
			cfg.Delete("runtimes")
		} else {
			cfg.Set("runtimes", runtimes.Bytes())
		}
		if def, _ := cfg.Get("default-runtime"); string(def) == jsonString(o.Name) {
			if def, ok := orig.Get("default-runtime"); ok {
				cfg.Set("default-runtime", def)
			} else {
				cfg.Delete("default-runtime")
			}
		}
		return jsonChange(o.Config, old, cfg.Indent("    ")), nil
	}
	features, err := member(cfg, "features", jsonobj.Exact)
	if err != nil {
		return nil, fmt.Errorf("docker config %s: %w", o.Config, err)
	}
	runtimes.Set(o.Name, []byte(`{"path":`+jsonString(o.Path)+`}`))
	cfg.Set("runtimes", runtimes.Bytes())
	features.Set("cdi", []byte("true"))
	cfg.Set("features", features.Bytes())
	if o.SetAsDefault {
		cfg.Set("default-runtime", []byte(jsonString(o.Name)))
	}
	return jsonChange(o.Config, old, cfg.Indent("    ")), nil
}

// jsonChange is change for a JSON file of the user's: the same content,
// indented otherwise, is no change.
func jsonChange(path string, old, data []byte) []Change {
	var a, b bytes.Buffer
	if old != nil && json.Compact(&a, old) == nil && json.Compact(&b, data) == nil && bytes.Equal(a.Bytes(), b.Bytes()) {
		return nil
	}
	return change(path, old, data, true)
}

// parseObject reads daemon.json or one of its members; empty input or
// null is an empty object. dockerd decodes the file into a struct, whose
// keys match case-insensitively, and runtimes and features into maps: a
// key twice, or two spellings of one field, would leave dockerd reading
// another value than the one we edit, so they are refused.
func parseObject(data []byte, path string, m jsonobj.Match) (*jsonobj.Object, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return jsonobj.New(path, m), nil
	}
	o, err := jsonobj.Parse(data, path, m)
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return nil, fmt.Errorf("not valid JSON at byte %d: %w", se.Offset, err)
	case errors.As(err, &te):
		return nil, fmt.Errorf("not a JSON object: %s is %s", pathName(path), te.Value)
	case err != nil:
		return nil, err
	case o == nil:
		return jsonobj.New(path, m), nil
	}
	return o, nil
}

func pathName(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}

// member is the member of o at key, as parsed from o.
func member(o *jsonobj.Object, key string, m jsonobj.Match) (*jsonobj.Object, error) {
	raw, _ := o.Get(key)
	return parseObject(raw, o.MemberPath(key), m)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
