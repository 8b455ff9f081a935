package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// docker adds the runtime to daemon.json and turns on CDI, keeping every
// other key where it was.
func docker(o Options, uninstall bool) ([]Change, error) {
	old, err := readFile(o.Config)
	if err != nil {
		return nil, err
	}
	cfg, err := parseObject(old)
	if err != nil {
		return nil, fmt.Errorf("docker config %s: %w", o.Config, err)
	}
	runtimes, err := parseObject(cfg.get("runtimes"))
	if err != nil {
		return nil, fmt.Errorf("docker config %s: runtimes: %w", o.Config, err)
	}
	if uninstall {
		if old == nil {
			return nil, nil
		}
		// What the user had before configure, from the backup of the
		// file as it was then.
		var orig, origRuntimes object
		if bak, err := readFile(o.Config + BackupSuffix); err == nil {
			if orig, err = parseObject(bak); err == nil {
				origRuntimes, _ = parseObject(orig.get("runtimes"))
			}
		}
		if rt := origRuntimes.get(o.Name); rt != nil {
			runtimes.set(o.Name, rt)
		} else {
			runtimes.del(o.Name)
		}
		if len(runtimes) == 0 {
			cfg.del("runtimes")
		} else {
			cfg.set("runtimes", runtimes.marshal())
		}
		if string(cfg.get("default-runtime")) == jsonString(o.Name) {
			if def := orig.get("default-runtime"); def != nil {
				cfg.set("default-runtime", def)
			} else {
				cfg.del("default-runtime")
			}
		}
		return jsonChange(o.Config, old, cfg.indent()), nil
	}
	features, err := parseObject(cfg.get("features"))
	if err != nil {
		return nil, fmt.Errorf("docker config %s: features: %w", o.Config, err)
	}
	runtimes.set(o.Name, []byte(`{"path":`+jsonString(o.Path)+`}`))
	cfg.set("runtimes", runtimes.marshal())
	features.set("cdi", []byte("true"))
	cfg.set("features", features.marshal())
	if o.SetAsDefault {
		cfg.set("default-runtime", []byte(jsonString(o.Name)))
	}
	return jsonChange(o.Config, old, cfg.indent()), nil
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

// object is a JSON object that keeps the order of its members.
type object []member

type member struct {
	key string
	val json.RawMessage
}

// parseObject reads a JSON object; empty input or null is an empty one.
func parseObject(data []byte) (object, error) {
	if len(bytes.TrimSpace(data)) == 0 || string(bytes.TrimSpace(data)) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %w", jsonErr(err))
	}
	var o object
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, jsonErr(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, jsonErr(err)
		}
		o.set(t.(string), v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonErr(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("text after the JSON object")
	}
	return o, nil
}

func jsonErr(err error) error {
	if err == nil {
		return errors.New("unexpected token")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("not valid JSON at byte %d: %w", se.Offset, err)
	}
	return err
}

func (o object) get(key string) json.RawMessage {
	for _, m := range o {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

func (o *object) set(key string, val json.RawMessage) {
	for i, m := range *o {
		if m.key == key {
			(*o)[i].val = val
			return
		}
	}
	*o = append(*o, member{key, val})
}

func (o *object) del(key string) {
	for i, m := range *o {
		if m.key == key {
			*o = append((*o)[:i], (*o)[i+1:]...)
			return
		}
	}
}

func (o object) marshal() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsonString(m.key))
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func (o object) indent() []byte {
	var b bytes.Buffer
	json.Indent(&b, o.marshal(), "", "    ")
	b.WriteByte('\n')
	return b.Bytes()
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
