package tests

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tool finds a program that mk/runtime.mk builds into .cache/tools, which
// `make test` puts on PATH.
func tool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(filepath.Dir(file)), ".cache", "tools", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not on PATH nor in .cache/tools: run make test (mk/runtime.mk builds it)", name)
	}
	return p
}

// runtimeHost is a simulated dgx-a100 whose GPU 0 is shared as two
// replicas, its spec under a fresh vendor in /var/run/cdi, and a gpuctk
// config that points gpuctk-runtime at it.
type runtimeHost struct {
	vendor, config, log string
	rootfs              string
}

func newRuntimeHost(t *testing.T, sharing string) *runtimeHost {
	t.Helper()
	driverRoot, _ := fakeDriverRoot(t, "dgx-a100")
	h := &runtimeHost{vendor: uniqueVendor(), log: filepath.Join(t.TempDir(), "gpuctk-runtime.log")}
	h.config = writeConfig(t, fmt.Sprintf("[cdi]\nvendor = %q\n\n[runtime]\nlog-file = %q\ncache-dir = %q\n%s",
		h.vendor, h.log, filepath.Join(t.TempDir(), "cache"), sharing))
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--driver-root", driverRoot,
		"--hook-path", bin("gpuctk-hook"), "--output", systemSpecPath(t, h.vendor), "--config", h.config)
	h.rootfs = busyboxRoot(t, true)
	return h
}

// runtimeWrapper returns a gpuctk-runtime for podman's --runtime that reads
// the host's config: podman hands the runtime a bare environment, so
// GPUCTK_CONFIG goes through a wrapper, as a host's
// /etc/gpuctk/config.toml would not need.
func (h *runtimeHost) runtimeWrapper(t *testing.T) string {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "gpuctk-runtime")
	script := fmt.Sprintf("#!/bin/sh\nGPUCTK_CONFIG=%s exec %s \"$@\"\n", h.config, bin("gpuctk-runtime"))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

const shareGPU0 = "\n[[sharing]]\ndevices = [\"0\"]\nstrategy = \"time-slicing\"\nreplicas = 2\n"

var (
	ctlNodes  = []string{"/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"}
	mig0Nodes = append([]string{"/dev/nvidia-caps/nvidia-cap606", "/dev/nvidia-caps/nvidia-cap607", "/dev/nvidia4"}, ctlNodes...)
)

// containerd is a private containerd on a temp root, state and socket.
type containerd struct {
	dir, config, sock string
}

// newContainerd writes a containerd 2.x main config (version 3, CRI off
// unless cri) and has `gpuctk runtime configure` add the nvidia runtime.
func newContainerd(t *testing.T, extra string) *containerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpuctk-containerd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &containerd{dir: dir, config: filepath.Join(dir, "config.toml"), sock: filepath.Join(dir, "containerd.sock")}
	main := fmt.Sprintf("version = 3\nroot = %q\nstate = %q\n%s\n[grpc]\n  address = %q\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "state"), extra, c.sock)
	if err := os.WriteFile(c.config, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, bin("gpuctk"), "runtime", "configure", "--runtime", "containerd", "--config", c.config,
		"--drop-in", filepath.Join(dir, "conf.d", "99-gpuctk.toml"), "--runtime-path", bin("gpuctk-runtime"))
	return c
}

// start runs containerd with env added until the test ends.
func (c *containerd) start(t *testing.T, env ...string) {
	t.Helper()
	tools := filepath.Dir(tool(t, "containerd-shim-runc-v2"))
	cmd := exec.Command(tool(t, "containerd"), "-c", c.config)
	cmd.Env = append(os.Environ(), append(env, "PATH="+tools+":"+os.Getenv("PATH"))...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("containerd's log:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		if exec.Command(tool(t, "ctr"), "-a", c.sock, "version").Run() == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("containerd exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer on %s:\n%s", c.sock, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ctrRun runs a container from rootfs through gpuctk-runtime as the runc
// binary of the runc shim, as the runtime "nvidia" does.
func (c *containerd) ctrRun(t *testing.T, rootfs string, flags []string, script string) (string, error) {
	t.Helper()
	id := fmt.Sprintf("gpuctk-%d", time.Now().UnixNano())
	args := append([]string{"-a", c.sock, "run", "--rm", "--rootfs", rootfs, "--runc-binary", bin("gpuctk-runtime")}, flags...)
	args = append(args, id, "/bin/sh", "-c", script)
	out, err := exec.Command(tool(t, "ctr"), args...).CombinedOutput()
	return dropWarnings(string(out)), err
}

// dropWarnings removes containerd's cgroup v1 deprecation warnings.
func dropWarnings(s string) string {
	var keep []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.Contains(l, "level=warning") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

func TestContainerdRuntime(t *testing.T) {
	h := newRuntimeHost(t, shareGPU0)
	c := newContainerd(t, `disabled_plugins = ["io.containerd.grpc.v1.cri"]`)

	t.Run("config dump", func(t *testing.T) {
		out := run(t, tool(t, "containerd"), "-c", c.config, "config", "dump")
		for _, want := range []string{
			"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]",
			"runtime_type = 'io.containerd.runc.v2'",
			"BinaryName = '" + bin("gpuctk-runtime") + "'",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("containerd config dump has no %q:\n%s", want, out)
			}
		}
	})

	c.start(t, "GPUCTK_CONFIG="+h.config)
	t.Run("NVIDIA_VISIBLE_DEVICES=mig-0", func(t *testing.T) {
		out, err := c.ctrRun(t, h.rootfs, []string{"--env", "NVIDIA_VISIBLE_DEVICES=mig-0"}, inspect)
		if err != nil {
			t.Fatalf("ctr run: %v\n%s", err, out)
		}
		checkInside(t, out, mig0Nodes)
		// 195 = 0xc3, 511 = 0x1ff, 606 = 0x25e: the numbers of the host's nodes.
		for _, want := range []string{"NODE /dev/nvidia4 character special file c3:4", "NODE /dev/nvidia-caps/nvidia-cap606 character special file 1ff:25e"} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("no %q inside", want)
			}
		}
		if log, _ := os.ReadFile(h.log); !strings.Contains(string(log), "injected "+h.vendor+"/gpu=mig-0 (from NVIDIA_VISIBLE_DEVICES)") {
			t.Errorf("gpuctk-runtime's log:\n%s", log)
		}
	})
	t.Run("device 0::1", func(t *testing.T) {
		// ctr injects the CDI device itself; the runtime sees void and passes through.
		out, err := c.ctrRun(t, h.rootfs, []string{"--device", h.vendor + "/gpu=0::1"}, inspect)
		if err != nil {
			t.Fatalf("ctr run: %v\n%s", err, out)
		}
		checkInside(t, out, append([]string{"/dev/nvidia0"}, ctlNodes...))
	})
	t.Run("unknown device", func(t *testing.T) {
		out, err := c.ctrRun(t, h.rootfs, []string{"--env", "NVIDIA_VISIBLE_DEVICES=9"}, "true")
		want := "unknown device " + h.vendor + "/gpu=9 (requested by NVIDIA_VISIBLE_DEVICES)"
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("ctr run with an unknown device: %v\n%s\nwant the runtime's error %q", err, out, want)
		}
	})
}

func TestPodmanRuntime(t *testing.T) {
	h := newRuntimeHost(t, "")
	wrapper := h.runtimeWrapper(t)
	for _, tc := range []struct {
		env   string
		nodes []string
	}{
		{"NVIDIA_VISIBLE_DEVICES=0", append([]string{"/dev/nvidia0"}, ctlNodes...)},
		{"NVIDIA_VISIBLE_DEVICES=mig-0", mig0Nodes},
	} {
		t.Run(tc.env, func(t *testing.T) {
			// The later --runtime wins over podmanArgs' runc.
			out, err := podman(t, h.rootfs, []string{"--runtime", wrapper, "-e", tc.env}, inspect)
			if err != nil {
				t.Fatalf("podman --runtime gpuctk-runtime: %v\n%s", err, out)
			}
			checkInside(t, out, tc.nodes)
		})
	}
	t.Run("no request", func(t *testing.T) {
		out, err := podman(t, h.rootfs, []string{"--runtime", wrapper}, "ls /dev; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES")
		if err != nil || strings.Contains(out, "nvidia") || !strings.Contains(out, "VISIBLE=\n") {
			t.Fatalf("podman without a request: %v\n%s", err, out)
		}
	})
}

// TestRuntimeBadInput runs the built gpuctk-runtime as a shim would, with
// real runc: each failure is one line on stderr, a non-zero exit, and
// config.json as it was.
func TestRuntimeBadInput(t *testing.T) {
	h := newRuntimeHost(t, "")
	noRunc := writeConfig(t, fmt.Sprintf("[cdi]\nvendor = %q\n[runtime]\nruntimes = [\"gpuctk-e2e-no-runc\"]\nlog-file = %q\ncache-dir = %q\n",
		h.vendor, h.log, filepath.Join(t.TempDir(), "cache")))
	for _, tc := range []struct {
		name, config, env string
		json              string // config.json's content; "" for the spec of busybox
		bundle            string // "" for the bundle made here
		want              string
	}{
		{name: "malformed config.json", config: h.config, json: "{\"ociVersion\": \"1.0.2\", \"process\": {\"env\": [\"NVIDIA_VISIBLE_DEVICES=0\"]\n",
			want: "config.json: not valid JSON at line 2 column 1: unexpected end of JSON input"},
		{name: "missing bundle", config: h.config, bundle: "/nonexistent/bundle",
			want: "bundle /nonexistent/bundle has no config.json: pass the bundle with --bundle"},
		{name: "unknown device", config: h.config, env: "mig-99",
			want: "unknown device " + h.vendor + "/gpu=mig-99 (requested by NVIDIA_VISIBLE_DEVICES): the CDI specs in /etc/cdi, /var/run/cdi provide " + h.vendor + "/gpu=0, "},
		{name: "no real runtime", config: noRunc, env: "0",
			want: "no low-level runtime found: none of gpuctk-e2e-no-runc is on PATH or in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle := tc.bundle
			if bundle == "" {
				bundle = t.TempDir()
				spec := tc.json
				if spec == "" {
					spec = fmt.Sprintf(`{"ociVersion":"1.0.2","process":{"args":["/bin/true"],"cwd":"/","env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=%s"]},"root":{"path":%q},"linux":{"namespaces":[{"type":"mount"}]}}`, tc.env, h.rootfs)
				}
				if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
			id := fmt.Sprintf("gpuctk-bad-%d", time.Now().UnixNano())
			cmd := exec.Command(bin("gpuctk-runtime"), "--root", t.TempDir(), "create", "--bundle", bundle, id)
			cmd.Env = append(os.Environ(), "GPUCTK_CONFIG="+tc.config)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err == nil {
				exec.Command("runc", "delete", "--force", id).Run()
				t.Fatal("create succeeded")
			}
			msg := stderr.String()
			if !strings.HasPrefix(msg, "gpuctk-runtime: create "+id+": ") || !strings.Contains(msg, tc.want) || strings.Count(msg, "\n") != 1 {
				t.Errorf("stderr = %q\nwant one line containing %q", msg, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
			if after, _ := os.ReadFile(filepath.Join(bundle, "config.json")); !bytes.Equal(before, after) {
				t.Error("config.json changed")
			}
		})
	}
}

// TestContainerdConfigVersions checks the claim of the drop-in's version:
// containerd 1.7 and 2.4 both load it beside the main configs each can
// have, and see the runtime, its copied options and the default.
func TestContainerdConfigVersions(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	samples := filepath.Join(filepath.Dir(filepath.Dir(file)), "engine", "testdata", "containerd")
	for _, tc := range []struct {
		sample     string // engine/testdata/containerd/<sample>/config.toml; "missing" for none
		containerd []string
		option     string // a runc option the runtime must have copied
	}{
		{"v1", []string{"containerd-1.7", "containerd"}, "NoPivotRoot = true"},
		{"v2-1.7-default", []string{"containerd-1.7", "containerd"}, "SystemdCgroup = true"},
		{"v2-imports", []string{"containerd-1.7", "containerd"}, "BinaryName"},
		{"missing", []string{"containerd-1.7", "containerd"}, "BinaryName"},
		{"v3", []string{"containerd"}, "SystemdCgroup = true"},
		{"v4-2.4-default", []string{"containerd"}, "SystemdCgroup = false"},
	} {
		t.Run(tc.sample, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "config.toml")
			if data, err := os.ReadFile(filepath.Join(samples, tc.sample, "config.toml")); err == nil {
				os.WriteFile(config, bytes.ReplaceAll(data, []byte("/etc/containerd"), []byte(dir)), 0o644)
			}
			// v2-imports imports this one; containerd 1.7 wants it to exist.
			os.WriteFile(filepath.Join(dir, "site.toml"), []byte("version = 2\n"), 0o644)
			run(t, bin("gpuctk"), "runtime", "configure", "--runtime", "containerd", "--set-as-default", "--config", config,
				"--drop-in", filepath.Join(dir, "conf.d", "99-gpuctk.toml"), "--runtime-path", bin("gpuctk-runtime"))
			for _, c := range tc.containerd {
				out, err := exec.Command(tool(t, c), "-c", config, "config", "dump").Output()
				if err != nil {
					t.Fatalf("%s config dump: %v", c, err)
				}
				dump := strings.ReplaceAll(string(out), `"`, "'")
				section := dump[max(0, strings.Index(dump, "containerd.runtimes.nvidia]")):]
				if end := strings.Index(section, "containerd.runtimes."+"runc]"); end > 0 {
					section = section[:end]
				}
				for _, want := range []string{"runtime_type = 'io.containerd.runc.v2'", "BinaryName = '" + bin("gpuctk-runtime") + "'", tc.option} {
					if !strings.Contains(section, want) {
						t.Errorf("%s: the nvidia runtime has no %q:\n%s", c, want, section)
					}
				}
				if !strings.Contains(dump, "default_runtime_name = 'nvidia'") {
					t.Errorf("%s: nvidia is not the default runtime", c)
				}
			}
		})
	}
}

// TestContainerdCDI: configure --cdi turns on containerd's own CDI support
// as each version reads it: 1.7 (config version 1 or 2) with enable_cdi and
// cdi_spec_dirs in its CRI plugin, 2.x with cdi_spec_dirs (CDI is always on
// there; a version 2 config is migrated); uninstall takes both back.
func TestContainerdCDI(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	samples := filepath.Join(filepath.Dir(filepath.Dir(file)), "engine", "testdata", "containerd")
	for _, tc := range []struct {
		sample     string // engine/testdata/containerd/<sample>/config.toml; "missing" for none
		containerd []string
	}{
		{"v2-1.7-default", []string{"containerd-1.7", "containerd"}},
		{"v2-cdi-header", []string{"containerd-1.7", "containerd"}},
		{"v1", []string{"containerd-1.7", "containerd"}},
		{"missing", []string{"containerd-1.7", "containerd"}},
		{"v3", []string{"containerd"}},
		{"v4-2.4-default", []string{"containerd"}},
	} {
		t.Run(tc.sample, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "config.toml")
			if data, err := os.ReadFile(filepath.Join(samples, tc.sample, "config.toml")); err == nil {
				os.WriteFile(config, bytes.ReplaceAll(data, []byte("/etc/containerd"), []byte(dir)), 0o644)
			}
			specDirs := []string{filepath.Join(dir, "cdi-static"), filepath.Join(dir, "cdi-dynamic")}
			configure := []string{"runtime", "configure", "--runtime", "containerd", "--config", config,
				"--drop-in", filepath.Join(dir, "conf.d", "99-gpuctk.toml"), "--runtime-path", bin("gpuctk-runtime")}
			run(t, bin("gpuctk"), append(configure, "--cdi", "--cdi-spec-dirs", strings.Join(specDirs, ","))...)
			wantDirs := "cdi_spec_dirs = ['" + strings.Join(specDirs, "', '") + "']"
			for _, c := range tc.containerd {
				dump := configDump(t, c, config)
				cri := dumpTable(dump, "'io.containerd.grpc.v1.cri'")
				want := []string{wantDirs, "enable_cdi = true"}
				if c != "containerd-1.7" {
					cri = dumpTable(dump, "'io.containerd.cri.v1.runtime'")
					want = want[:1] // 2.4 has CDI always on, and no enable_cdi
				}
				for _, w := range want {
					if !strings.Contains(cri, w) {
						t.Errorf("%s: the CRI plugin has no %q:\n%s", c, w, cri)
					}
				}
			}
			run(t, bin("gpuctk"), append(configure, "--uninstall")...)
			if tc.sample == "missing" {
				// The config configure wrote goes whole (1.7 cannot dump
				// a config that is not there).
				if _, err := os.Stat(config); err == nil {
					t.Errorf("uninstall left the config it wrote")
				}
				return
			}
			for _, c := range tc.containerd {
				if dump := configDump(t, c, config); strings.Contains(dump, specDirs[0]) || strings.Contains(dump, "enable_cdi = true") {
					t.Errorf("%s: after uninstall the config still has CDI on with gpuctk's folders:\n%s", c, dump)
				}
			}
		})
	}
}

// configDump is `containerd config dump` of a config, quotes as '.
func configDump(t *testing.T, containerd, config string) string {
	t.Helper()
	out, err := exec.Command(tool(t, containerd), "-c", config, "config", "dump").Output()
	if err != nil {
		t.Fatalf("%s config dump: %v", containerd, err)
	}
	return strings.ReplaceAll(string(out), `"`, "'")
}

// TestContainerdDropInKeepsCRI configures containerd without
// --set-as-default: containerd 1.7 replaces a plugin's whole section with an
// import's, so configure must leave runc, its options and the rest of the
// CRI settings of the main config in place, on 1.7 and on 2.x, and a later
// edit of the main config (the sandbox image) must take effect on both; a
// second configure keeps it, and uninstall leaves only the user's edit.
func TestContainerdDropInKeepsCRI(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         []string // in the dump's CRI section
		runc         string   // in the dump's runc runtime
	}{
		{"v2", "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.example/pause:9\"\n\n" +
			"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n" +
			"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n",
			nil, "SystemdCgroup = true"},
		{"v2-no-cri", "version = 2\nroot = \"/var/lib/containerd\"\n", nil, "runtime_type = 'io.containerd.runc.v2'"},
		{"missing", "", nil, "runtime_type = 'io.containerd.runc.v2'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "config.toml")
			if tc.config != "" {
				os.WriteFile(config, []byte(tc.config), 0o644)
			}
			configure := []string{"runtime", "configure", "--runtime", "containerd", "--config", config,
				"--drop-in", filepath.Join(dir, "conf.d", "99-gpuctk.toml"), "--runtime-path", bin("gpuctk-runtime")}
			run(t, bin("gpuctk"), configure...)
			// The user's edit after configure: a new sandbox image.
			configured, _ := os.ReadFile(config)
			const image = "registry.example/pause:10"
			edited := strings.Replace(string(configured), "registry.example/pause:9", image, 1)
			if edited == string(configured) {
				edited += "\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"" + image + "\"\n"
			}
			os.WriteFile(config, []byte(edited), 0o644)
			run(t, bin("gpuctk"), configure...)
			if again, _ := os.ReadFile(config); string(again) != edited {
				t.Errorf("a second configure changed the edited config:\n%s\nwant:\n%s", again, edited)
			}
			for _, c := range []string{"containerd-1.7", "containerd"} {
				out, err := exec.Command(tool(t, c), "-c", config, "config", "dump").Output()
				if err != nil {
					t.Fatalf("%s config dump: %v", c, err)
				}
				dump := strings.ReplaceAll(string(out), `"`, "'")
				for _, want := range append(tc.want[:len(tc.want):len(tc.want)], image, "default_runtime_name = 'runc'", "containerd.runtimes.nvidia]",
					"BinaryName = '"+bin("gpuctk-runtime")+"'") {
					if !strings.Contains(dump, want) {
						t.Errorf("%s: the config has no %q:\n%s", c, want, dump)
					}
				}
				if runc := dumpTable(dump, "containerd.runtimes.runc"); !strings.Contains(runc, tc.runc) {
					t.Errorf("%s: the runc runtime has no %q:\n%s", c, tc.runc, runc)
				}
			}
			run(t, bin("gpuctk"), append(configure, "--uninstall")...)
			if after, _ := os.ReadFile(config); strings.Contains(string(after), ">>> gpuctk") || strings.Contains(string(after), "gpuctk-runtime") {
				t.Errorf("uninstall left gpuctk's lines in the main config:\n%s", after)
			}
			if _, err := os.Stat(filepath.Join(dir, "conf.d")); err == nil {
				t.Error("uninstall left the drop-in folder")
			}
		})
	}
}

// dumpTable returns the lines of a table of a config dump and its
// sub-tables, the table named by the end of its path.
func dumpTable(dump, path string) string {
	start := strings.Index(dump, path+"]")
	if start < 0 {
		return ""
	}
	var b strings.Builder
	for _, line := range strings.Split(dump[start:], "\n")[1:] {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "[") && !strings.Contains(l, path+".") {
			break
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// TestRuntimeConfigure drives `gpuctk runtime configure` as a user would:
// dry run, configure, again, uninstall, and its bad input.
func TestRuntimeConfigure(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "config.toml")
	original := []byte("# my containerd\nversion = 2\nroot = \"/var/lib/containerd\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n")
	os.WriteFile(config, original, 0o644)
	dropIn := filepath.Join(dir, "conf.d", "99-gpuctk.toml")
	configure := func(extra ...string) (string, error) {
		args := append([]string{"runtime", "configure", "--runtime", "containerd", "--config", config, "--drop-in", dropIn,
			"--runtime-path", "/usr/bin/gpuctk-runtime"}, extra...)
		out, err := exec.Command(bin("gpuctk"), args...).CombinedOutput()
		return string(out), err
	}

	out, err := configure("--dry-run")
	// A version 2 config gets the runtime in a block of its own, no
	// drop-in, which containerd 1.7 would let replace its CRI section.
	if err != nil || strings.Contains(out, dropIn) || !strings.Contains(out, "BinaryName = '/usr/bin/gpuctk-runtime'") ||
		!strings.Contains(out, "SystemdCgroup = true") || !strings.Contains(out, "# "+config+": would be written\n") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(config); !bytes.Equal(got, original) {
		t.Error("the dry run changed the config")
	}
	if _, err := os.Stat(dropIn); err == nil {
		t.Error("the dry run wrote the drop-in")
	}

	out, err = configure()
	if err != nil || !strings.Contains(out, "wrote "+config+" ") || !strings.Contains(out, "restart containerd") {
		t.Fatalf("configure: %v\n%s", err, out)
	}
	if bak, _ := os.ReadFile(config + ".gpuctk.bak"); !bytes.Equal(bak, original) {
		t.Error("no backup of the old config")
	}
	out, err = configure()
	if err != nil || !strings.Contains(out, `containerd has the runtime "nvidia" already: nothing to change`) {
		t.Fatalf("configure again: %v\n%s", err, out)
	}
	out, err = configure("--uninstall")
	if err != nil || !strings.Contains(out, config) {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(config); !bytes.Equal(got, original) {
		t.Errorf("uninstall left the config as:\n%s", got)
	}
	// Undone, nothing of gpuctk's is left: no backup, no empty conf.d.
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != "config.toml" {
		t.Errorf("after uninstall the folder holds %v, want only config.toml", entries)
	}
	// On a host without containerd's config, configure makes the files and
	// their folders; uninstall removes all of them.
	fresh := filepath.Join(t.TempDir(), "etc", "containerd")
	freshArgs := []string{"runtime", "configure", "--runtime", "containerd", "--config", filepath.Join(fresh, "config.toml"),
		"--drop-in", filepath.Join(fresh, "conf.d", "99-gpuctk.toml"), "--runtime-path", "/usr/bin/gpuctk-runtime"}
	run(t, bin("gpuctk"), freshArgs...)
	run(t, bin("gpuctk"), append(freshArgs, "--uninstall")...)
	if _, err := os.Stat(fresh); err == nil {
		entries, _ := os.ReadDir(fresh)
		t.Errorf("uninstall left %s holding %v", fresh, entries)
	}

	podman, err := exec.Command(bin("gpuctk"), "runtime", "configure", "--runtime", "podman").CombinedOutput()
	if err != nil || !strings.Contains(string(podman), "podman needs no configuration") {
		t.Errorf("podman: %v\n%s", err, podman)
	}
	// Not a file: neither read (a FIFO would hang) nor renamed over.
	fifo := filepath.Join(t.TempDir(), "config.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
			t.Errorf("the FIFO given as --config was replaced: %v", err)
		}
	}()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--runtime", "cri-o"}, `--runtime "cri-o" is not known: use containerd, crio, docker or podman`},
		{[]string{"--runtime", "docker", "--config", writeConfig(t, "{\"runtimes\": [")}, "docker config "},
		{[]string{"--runtime", "docker", "--drop-in", "/etc/docker/daemon.d/gpuctk.json"}, "docker reads no drop-in files: --drop-in is for containerd and CRI-O"},
		{[]string{"--runtime", "containerd", "--config", fifo}, fifo + " is a FIFO, not a config file: name the runtime's config file"},
	} {
		out, err := exec.Command(bin("gpuctk"), append([]string{"runtime", "configure"}, tc.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) || strings.Count(string(out), "\n") != 1 {
			t.Errorf("configure %v: %v\n%s\nwant one line containing %q", tc.args, err, out, tc.want)
		}
	}
}

// A broken configuration fails create, saying where, and leaves the other
// commands working so containers can still be deleted.
func TestRuntimeBrokenConfig(t *testing.T) {
	cfg := writeConfig(t, "[runtime]\nruntimes = \"runc\"\n")
	log := filepath.Join(t.TempDir(), "log.json")
	cmd := exec.Command(bin("gpuctk-runtime"), "--log", log, "--log-format", "json", "create", "--bundle", t.TempDir(), "ctr1")
	cmd.Env = append(os.Environ(), "GPUCTK_CONFIG="+cfg)
	out, err := cmd.CombinedOutput()
	want := "gpuctk-runtime: create ctr1: config " + cfg + ": line 2 column 12: runtime.runtimes: cannot decode TOML string into []string\n"
	if err == nil || string(out) != want {
		t.Errorf("create: %v\n%q\nwant %q", err, out, want)
	}
	if data, _ := os.ReadFile(log); !strings.Contains(string(data), `"level":"error"`) || !strings.Contains(string(data), "runtime.runtimes") {
		t.Errorf("runc's log: %s", data)
	}
	cmd = exec.Command(bin("gpuctk-runtime"), "--version")
	cmd.Env = append(os.Environ(), "GPUCTK_CONFIG="+cfg)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "runc version") {
		t.Errorf("--version with a broken config: %v\n%s", err, out)
	}
}
