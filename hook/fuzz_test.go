package hook

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzState feeds arbitrary OCI state and bundle config.json to the hook:
// it must fail cleanly (one line, non-zero) or find a root, never panic.
func FuzzState(f *testing.F) {
	f.Add(`{"ociVersion":"1.0.2","id":"c","status":"creating","pid":1,"bundle":"BUNDLE"}`, `{"root":{"path":"rootfs"}}`)
	f.Add(`{"bundle":"BUNDLE"}`, `{"root":{"path":"/abs"}}`)
	f.Add(`{"bundle":""}`, `{}`)
	f.Fuzz(func(t *testing.T, state, config string) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644)
		b, _ := json.Marshal(dir)
		state = strings.ReplaceAll(state, `"BUNDLE"`, string(b))
		env := &Env{Stdin: strings.NewReader(state), Stderr: &bytes.Buffer{}}
		root, err := env.ContainerRoot()
		if err == nil && root == "" {
			t.Fatal("empty root without an error")
		}
	})
}

// FuzzFlags feeds arbitrary argument lists to the hook's flag parser.
func FuzzFlags(f *testing.F) {
	f.Add("--link\x00a::/b\x00--folder\x00/usr/lib")
	f.Add("--x=1\x00--link")
	f.Fuzz(func(t *testing.T, joined string) {
		env := &Env{Stderr: &bytes.Buffer{}}
		flags(env, strings.Split(joined, "\x00"), "link", "folder", "ldconfig")
	})
}
