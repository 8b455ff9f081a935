package runtime

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestRequested(t *testing.T) {
	env := func(vals ...string) *specs.Process {
		p := &specs.Process{Env: []string{"PATH=/bin"}}
		for _, v := range vals {
			p.Env = append(p.Env, EnvVar+"="+v)
		}
		return p
	}
	devnull := func(dest string) specs.Mount {
		return specs.Mount{Destination: dest, Source: "/dev/null", Type: "bind", Options: []string{"bind", "ro"}}
	}
	tests := []struct {
		name    string
		spec    specs.Spec
		want    *request
		wantErr string
	}{
		{name: "nothing", spec: specs.Spec{Process: env()}},
		{name: "no process", spec: specs.Spec{}},
		{name: "env mig", spec: specs.Spec{Process: env("mig-0")},
			want: &request{source: EnvVar, devices: []string{"nvidia.com/gpu=mig-0"}}},
		{name: "env list of our names", spec: specs.Spec{Process: env("0, 0::1,GPU-4c8d3e2a-1f0b-4b7e-9a51-6d2f0c1e8a77,1:0,0")},
			want: &request{source: EnvVar, devices: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=0::1", "nvidia.com/gpu=GPU-4c8d3e2a-1f0b-4b7e-9a51-6d2f0c1e8a77", "nvidia.com/gpu=1:0"}}},
		{name: "env qualified", spec: specs.Spec{Process: env("nvidia.com/gpu=mig-0,mig-1")},
			want: &request{source: EnvVar, devices: []string{"nvidia.com/gpu=mig-0", "nvidia.com/gpu=mig-1"}}},
		// The image sets the environment: it may not pull in other vendors' devices.
		{name: "env other kind", spec: specs.Spec{Process: env("example.com/fpga=a,mig-1")},
			wantErr: `"example.com/fpga=a" is not a nvidia.com/gpu device: name devices of other kinds with cdi.k8s.io/ annotations`},
		{name: "mount other kind", spec: specs.Spec{Mounts: []specs.Mount{devnull(MountDir + "/cdi/example.com/fpga=a")}},
			wantErr: `is not a nvidia.com/gpu device`},
		{name: "env all", spec: specs.Spec{Process: env("all")},
			want: &request{source: EnvVar, devices: []string{"nvidia.com/gpu=all"}}},
		{name: "env none", spec: specs.Spec{Process: env("none")},
			want: &request{source: EnvVar + "=none", commonOnly: true}},
		{name: "env void", spec: specs.Spec{Process: env("void")}},
		{name: "env empty", spec: specs.Spec{Process: env("")}},
		{name: "env commas only", spec: specs.Spec{Process: env(" , ")}},
		{name: "env last wins", spec: specs.Spec{Process: env("all", "1")},
			want: &request{source: EnvVar, devices: []string{"nvidia.com/gpu=1"}}},
		{name: "env void beats mounts", spec: specs.Spec{Process: env("void"), Mounts: []specs.Mount{devnull(MountDir + "/0")}}},
		{name: "env void beats annotations", spec: specs.Spec{Process: env("void"), Annotations: map[string]string{"cdi.k8s.io/x": "nvidia.com/gpu=0"}}},
		{name: "env bad name", spec: specs.Spec{Process: env("0,gpu zero")},
			wantErr: `NVIDIA_VISIBLE_DEVICES=0,gpu zero: "gpu zero" is not a device name`},
		{name: "env bad qualified name", spec: specs.Spec{Process: env("nvidia.com=0")},
			wantErr: `"nvidia.com=0" is not a CDI device name`},
		{name: "annotation", spec: specs.Spec{Process: env("1"), Annotations: map[string]string{
			"cdi.k8s.io/gpu-plugin_0": "nvidia.com/gpu=mig-0", "io.kubernetes.cri.container-name": "c"}},
			want: &request{source: "annotation cdi.k8s.io/gpu-plugin_0", devices: []string{"nvidia.com/gpu=mig-0"}, annotated: true}},
		{name: "annotations in key order", spec: specs.Spec{Annotations: map[string]string{
			"cdi.k8s.io/b": "nvidia.com/gpu=1", "cdi.k8s.io/a": "nvidia.com/gpu=0,nvidia.com/gpu=1"}},
			want: &request{source: "annotations cdi.k8s.io/a, cdi.k8s.io/b", devices: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}, annotated: true}},
		{name: "annotation short name", spec: specs.Spec{Annotations: map[string]string{"cdi.k8s.io/x": "mig-0"}},
			wantErr: `annotation cdi.k8s.io/x: "mig-0" is not a fully qualified CDI device name`},
		{name: "mounts", spec: specs.Spec{Process: env(), Mounts: []specs.Mount{
			{Destination: "/proc", Source: "proc", Type: "proc"},
			devnull(MountDir + "/mig-0"),
			devnull(MountDir + "/cdi/nvidia.com/gpu=0::1"),
			{Destination: MountDir + "/1", Source: "/tmp/x", Type: "bind"},
		}}, want: &request{source: "mounts under " + MountDir, devices: []string{"nvidia.com/gpu=mig-0", "nvidia.com/gpu=0::1"}}},
		{name: "mounts named by env", spec: specs.Spec{Process: env(MountDir), Mounts: []specs.Mount{devnull(MountDir + "/0")}},
			want: &request{source: "mounts under " + MountDir, devices: []string{"nvidia.com/gpu=0"}}},
		{name: "env beats mounts", spec: specs.Spec{Process: env("1"), Mounts: []specs.Mount{devnull(MountDir + "/0")}},
			want: &request{source: EnvVar, devices: []string{"nvidia.com/gpu=1"}}},
		{name: "mount bad name", spec: specs.Spec{Mounts: []specs.Mount{devnull(MountDir + "/a/b")}},
			wantErr: "mount " + MountDir + `/a/b: "a/b" is not a device name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := requested(&tt.spec, "nvidia.com/gpu", true)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != nil {
				got.seen = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("requested = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestManyNames: 100,000 names are handled or refused in one line at
// once, not in the minutes work quadratic in the names would take.
func TestManyNames(t *testing.T) {
	names := func(n int, name func(i int) string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(name(i))
		}
		return b.String()
	}
	const n = 100_000
	distinct := names(n, func(i int) string { return fmt.Sprintf("mig-%d", i) })
	qualified := names(n, func(i int) string { return fmt.Sprintf("nvidia.com/gpu=mig-%d", i) })
	many := map[string]string{}
	for i := range n {
		many[fmt.Sprintf("cdi.k8s.io/p%d", i)] = fmt.Sprintf("nvidia.com/gpu=mig-%d", i)
	}
	tests := []struct {
		name    string
		spec    specs.Spec
		devices int
		wantErr string
	}{
		{"env distinct", specs.Spec{Process: &specs.Process{Env: []string{EnvVar + "=" + distinct}}}, 0,
			"NVIDIA_VISIBLE_DEVICES asks for more than 4096 devices, more than any host has: name fewer, or `all`"},
		{"env repeated", specs.Spec{Process: &specs.Process{Env: []string{EnvVar + "=" + names(n, func(int) string { return "mig-0" })}}}, 1, ""},
		{"one annotation", specs.Spec{Annotations: map[string]string{"cdi.k8s.io/p": qualified}}, 0,
			"annotation cdi.k8s.io/p asks for more than 4096 devices"},
		{"many annotations", specs.Spec{Annotations: many}, 0,
			"annotations cdi.k8s.io/p0, cdi.k8s.io/p1, cdi.k8s.io/p10, cdi.k8s.io/p100, cdi.k8s.io/p1000, cdi.k8s.io/p10000, cdi.k8s.io/p10001, cdi.k8s.io/p10002, cdi.k8s.io/p10003, cdi.k8s.io/p10004, cdi.k8s.io/p10005, cdi.k8s.io/p10006 and 99988 more asks for more than 4096 devices"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			var got *request
			var err error
			go func() {
				defer close(done)
				got, err = requested(&tt.spec, "nvidia.com/gpu", true)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("still resolving after 5 s")
			}
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) || len(err.Error()) > 600 {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got.devices) != tt.devices {
				t.Fatalf("requested = %v, %v; want %d devices", got, err, tt.devices)
			}
		})
	}
}

// TestRequestedWithoutEnv: with accept-visible-devices-env off, the
// variable requests nothing; annotations and mounts still do, and void
// still means the devices are in already.
func TestRequestedWithoutEnv(t *testing.T) {
	env := func(v string) *specs.Process { return &specs.Process{Env: []string{EnvVar + "=" + v}} }
	for _, tc := range []struct {
		name string
		spec specs.Spec
		want []string
	}{
		{"env only", specs.Spec{Process: env("all")}, nil},
		{"env and mount", specs.Spec{Process: env("all"), Mounts: []specs.Mount{{Destination: MountDir + "/0", Source: "/dev/null"}}}, []string{"nvidia.com/gpu=0"}},
		{"annotation", specs.Spec{Process: env("all"), Annotations: map[string]string{"cdi.k8s.io/plugin": "nvidia.com/gpu=mig-1"}}, []string{"nvidia.com/gpu=mig-1"}},
		{"void", specs.Spec{Process: env("void"), Annotations: map[string]string{"cdi.k8s.io/plugin": "nvidia.com/gpu=mig-1"}}, nil},
	} {
		got, err := requested(&tc.spec, "nvidia.com/gpu", false)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var devs []string
		if got != nil {
			devs = got.devices
		}
		if !reflect.DeepEqual(devs, tc.want) {
			t.Errorf("%s: devices %v, want %v", tc.name, devs, tc.want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args []string
		want invocation
	}{
		{[]string{"--root", "/run/runc", "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/pid", "ctr1"},
			invocation{command: "create", logFile: "/b/log.json", logFormat: "json", bundle: "/b", id: "ctr1"}},
		{[]string{"--debug", "-log=/l", "create", "-b=/b", "--no-pivot", "--console-socket", "/s", "ctr2"},
			invocation{command: "create", logFile: "/l", debug: true, bundle: "/b", id: "ctr2"}},
		{[]string{"--systemd-cgroup", "create", "ctr3", "-b", "/b"},
			invocation{command: "create", bundle: "/b", id: "ctr3"}},
		{[]string{"create", "--", "-odd-id"}, invocation{command: "create", id: "-odd-id"}},
		{[]string{"--root", "/r", "start", "--bundle", "/b", "ctr"}, invocation{command: "start"}},
		{[]string{"--version"}, invocation{version: true}},
		{[]string{"-v"}, invocation{version: true}},
		// runc prints its help or version instead of running create.
		{[]string{"create", "--help"}, invocation{command: "create", help: true}},
		{[]string{"create", "-b", "/b", "ctr", "-h"}, invocation{command: "create", help: true, bundle: "/b", id: "ctr"}},
		{[]string{"--help", "create", "ctr"}, invocation{command: "create", help: true, id: "ctr"}},
		{[]string{"-h=true", "create", "ctr"}, invocation{command: "create", help: true, id: "ctr"}},
		{[]string{"--help=false", "create", "ctr"}, invocation{command: "create", id: "ctr"}},
		{[]string{"--version", "create", "ctr"}, invocation{command: "create", version: true, id: "ctr"}},
		{[]string{"create", "--", "--help"}, invocation{command: "create", id: "--help"}},
		// crun's global options that take a value (crun is in the
		// default [runtime] runtimes).
		{[]string{"--cgroup-manager", "systemd", "--log-level", "debug", "create", "--bundle", "/b", "ctr"},
			invocation{command: "create", bundle: "/b", id: "ctr"}},
		// Booleans as Go's flag package reads them.
		{[]string{"--debug=1", "create", "ctr"}, invocation{command: "create", debug: true, id: "ctr"}},
		{[]string{"--debug=f", "create", "ctr"}, invocation{command: "create", id: "ctr"}},
		{nil, invocation{}},
	}
	for _, tt := range tests {
		if got := parseArgs(tt.args); got != tt.want {
			t.Errorf("parseArgs(%q) = %+v, want %+v", tt.args, got, tt.want)
		}
	}
}

func TestUnknownDevicesListIsBounded(t *testing.T) {
	var have []string
	for i := range 1345 {
		have = append(have, fmt.Sprintf("nvidia.com/gpu=mig-%d", i))
	}
	err := unknownDevices([]string{"nvidia.com/gpu=9"}, &request{source: EnvVar}, []string{"/etc/cdi"}, have, nil)
	msg := err.Error()
	if !strings.Contains(msg, "nvidia.com/gpu=mig-11 and 1333 more (`gpuctk cdi list` shows them all)") || strings.Contains(msg, "mig-12,") || len(msg) > 600 {
		t.Errorf("message = %q", msg)
	}
}
