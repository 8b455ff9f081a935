package runtime

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// FuzzCreate runs create on arbitrary config.json content against the test
// specs: it either fails in one line and leaves config.json as it was, or
// leaves it unchanged (nothing asked) or rewritten as valid JSON.
func FuzzCreate(f *testing.F) {
	base, err := os.ReadFile("testdata/config.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(base)
	for _, s := range []string{
		`{"ociVersion":"1.0.2","process":{"env":["NVIDIA_VISIBLE_DEVICES=mig-0,0::1"]},"root":{"path":"rootfs"}}`,
		`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]},"linux":{}}`,
		`{"annotations":{"cdi.k8s.io/x":"nvidia.com/gpu=0"},"process":{}}`,
		`{"mounts":[{"destination":"/var/run/nvidia-container-devices/0","source":"/dev/null"}]}`,
		`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=none"]},"hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-runtime-hook"}]}}`,
		`[]`, `{"process":7}`, `{"process":{"env":["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9"]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fx := newFixture(t, nil)
		if err := os.WriteFile(fx.config, data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := fx.rt.Run([]string{"create", "--bundle", fx.bundle, "c1"})
		after, _ := os.ReadFile(fx.config)
		if err != nil {
			if !bytes.Equal(after, data) {
				t.Fatalf("create failed (%v) and changed config.json", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		if !bytes.Equal(after, data) && !json.Valid(after) {
			t.Fatalf("config.json rewritten as invalid JSON: %q", after)
		}
	})
}

// FuzzParseArgs feeds arbitrary runc command lines to the argument parser.
func FuzzParseArgs(f *testing.F) {
	f.Add("--root\x00/run/runc\x00--log\x00/x.log\x00--log-format\x00json\x00create\x00--bundle\x00/b\x00--pid-file\x00/p\x00id")
	f.Add("create\x00-b=/b\x00id")
	f.Add("--systemd-cgroup\x00delete\x00--force\x00id")
	f.Fuzz(func(t *testing.T, joined string) {
		parseArgs(strings.Split(joined, "\x00"))
	})
}
