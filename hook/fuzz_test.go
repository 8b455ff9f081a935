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
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, state, config string) {
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

// FuzzLdConf feeds arbitrary ld.so.conf files, including one another, to
// the hook's reader: it must stay within its bounds and never panic.
func FuzzLdConf(f *testing.F) {
	f.Add("include /etc/ld.so.conf.d/*.conf\n/usr/local/lib\n", "/opt/a # comment\nhwcap 0 x\n")
	f.Add("include\tld.so.conf.d/[a-\n", "include /etc/ld.so.conf\n")
	f.Fuzz(func(t *testing.T, conf, included string) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "etc/ld.so.conf.d"), 0o755)
		os.WriteFile(filepath.Join(dir, "etc/ld.so.conf"), []byte(conf), 0o644)
		os.WriteFile(filepath.Join(dir, "etc/ld.so.conf.d/a.conf"), []byte(included), 0o644)
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		c := readLdConf(root)
		if len(c.Folders) > maxConfFolders || c.files > maxConfFiles+1 {
			t.Fatalf("past the bounds: %d folders, %d files", len(c.Folders), c.files)
		}
	})
}
