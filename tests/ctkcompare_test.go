package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/tests/fakehost"
	"github.com/gpuctk/gpuctk/tests/fakenvml"
	"golang.org/x/sys/unix"
)

// specCounts are what a spec gives a container that asks for every device:
// distinct host files mounted, device nodes, and links the hook makes.
type specCounts struct{ files, nodes, links int }

// countSpec counts a JSON spec's edits for the devices named by keep. With
// conditional, a link counts when its target is among what the container
// then has, as gpuctk-hook makes them; else every link listed counts, as
// nvidia-cdi-hook's create-symlinks makes them (its update-ldcache call
// makes SONAME links too, through ldconfig: not counted).
func countSpec(t *testing.T, data []byte, keep func(name string) bool, conditional bool) specCounts {
	t.Helper()
	type edits struct {
		DeviceNodes []struct{ Path string }
		Mounts      []struct{ HostPath, ContainerPath string }
		Hooks       []struct{ Args []string }
	}
	var spec struct {
		ContainerEdits edits
		Devices        []struct {
			Name           string
			ContainerEdits edits
		}
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	all := []edits{spec.ContainerEdits}
	for _, d := range spec.Devices {
		if keep(d.Name) {
			all = append(all, d.ContainerEdits)
		}
	}
	files, nodes, have := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var links []string
	for _, e := range all {
		for _, m := range e.Mounts {
			files[m.HostPath], have[m.ContainerPath] = true, true
		}
		for _, n := range e.DeviceNodes {
			nodes[n.Path], have[n.Path] = true, true
		}
		for _, h := range e.Hooks {
			for i, a := range h.Args {
				if a == "--link" && i+1 < len(h.Args) {
					links = append(links, h.Args[i+1])
				}
			}
		}
	}
	made := map[string]bool{}
	for _, l := range links {
		target, link, _ := strings.Cut(l, "::")
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(link), target)
		}
		if (have[target] || !conditional) && !made[link] {
			made[link], have[link] = true, true
		}
	}
	return specCounts{len(files), len(nodes), len(made)}
}

// TestCompareNVIDIACtk generates gpuctk's spec and nvidia-ctk's on the same
// full 580 root (8 GPUs, dgx-a100, over the fake NVML) and logs what each
// gives a container asking for every GPU: the side-by-side figure.
func TestCompareNVIDIACtk(t *testing.T) {
	p, err := inventory.LoadProfile("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	nvml, hostFile := nvmlRoot(t, p)
	root := filepath.Join(t.TempDir(), "driver")
	if err := fakehost.BuildFull(root, p); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(fakehost.LibDir, "libnvidia-ml.so."+p.DriverVersion)
	data, err := os.ReadFile(filepath.Join(nvml, lib))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, lib), data, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "ldconfig", "-r", root)
	env := []string{fakenvml.EnvVar + "=" + hostFile}
	ours := filepath.Join(t.TempDir(), "nvidia.json")
	if _, errs, code := gpuctkRun(t, env, "cdi", "generate", "--driver-root", root, "--driver-folder=false", "--output", ours); code != 0 {
		t.Fatalf("gpuctk cdi generate: %s", errs)
	}
	theirs := nvidiaCtkGenerate(t, root, env)
	spec, err := os.ReadFile(ours)
	if err != nil {
		t.Fatal(err)
	}
	isCap := func(n string) bool { return strings.HasPrefix(n, "capability-") }
	with := countSpec(t, spec, func(string) bool { return true }, true)
	without := countSpec(t, spec, func(n string) bool { return !isCap(n) }, true)
	nv := countSpec(t, theirs, func(string) bool { return true }, false)
	t.Logf("host files / device nodes / links, every device of 8 GPUs: gpuctk with every capability device %d/%d/%d, without %d/%d/%d; nvidia-ctk %d/%d/%d",
		with.files, with.nodes, with.links, without.files, without.nodes, without.links, nv.files, nv.nodes, nv.links)
	if with.files < nv.files || with.nodes < nv.nodes {
		t.Errorf("gpuctk with every capability device gives fewer files or nodes than nvidia-ctk")
	}
}

// nvidiaCtkGenerate runs nvidia-ctk cdi generate in NVML mode on a fake
// driver root (the NVML test double there reading the host env names),
// and returns its JSON spec. nvidia-ctk reads the MIG minors from the
// host's /proc, so it runs in a mount namespace of its own where the
// root's are at /proc/driver/nvidia-caps/mig-minors.
func nvidiaCtkGenerate(t *testing.T, root string, env []string, args ...string) []byte {
	t.Helper()
	ctk := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs /proc/driver && mkdir /proc/driver/nvidia-caps && cp "$1" /proc/driver/nvidia-caps/mig-minors && shift && exec "$@"`,
		"sh", filepath.Join(root, "proc/driver/nvidia-caps/mig-minors"),
		tool(t, "nvidia-ctk"), "cdi", "generate", "--format", "json", "--mode", "nvml", "--driver-root", root, "--dev-root", root}, args...)...)
	ctk.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	ctk.Stdout, ctk.Stderr = &out, &errb
	if err := ctk.Run(); err != nil {
		t.Fatalf("nvidia-ctk cdi generate: %v\n%s", err, errb.String())
	}
	return []byte(out.String())
}

// TestCompareNVIDIACtkHostLayouts generates gpuctk's spec and nvidia-ctk's
// on an h100 whose driver is laid out as real hosts lay it out (see
// tests/fakehost/README.md), over the fake NVML: every file nvidia-ctk's
// spec gives a container, gpuctk's gives it too (at the same path, or the
// same file at its usual path), and the programs gpuctk gives are ELF
// programs, never the wrapper scripts. nvidia-ctk mounts every file named
// for the driver version in libcuda's folder; gpuctk leaves out the GTK
// libraries of nvidia-settings' GUI, which no container runs.
func TestCompareNVIDIACtkHostLayouts(t *testing.T) {
	p, err := inventory.LoadProfile("h100")
	if err != nil {
		t.Fatal(err)
	}
	nvml := fakeNVMLLibrary(t)
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, root string)
		lib   string
		flags []string
	}{
		{"prefix on its own read-only file system", func(t *testing.T, root string) { fakehost.BuildPrefix(t, root, p) }, fakehost.Prefix + "/lib64", nil},
		{"GKE", func(t *testing.T, root string) {
			if err := fakehost.BuildGKE(root, p); err != nil {
				t.Fatal(err)
			}
		}, fakehost.GKEPrefix + "/lib64", []string{"--library-search-path", fakehost.GKEPrefix + "/lib64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "driver")
			tc.build(t, root)
			// The NVML double in the driver's place, bound over the file
			// on a read-only prefix.
			dst := filepath.Join(root, tc.lib, "libnvidia-ml.so."+p.DriverVersion)
			if err := unix.Mount(nvml, dst, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
			env := []string{fakenvml.EnvVar + "=" + nvmlHostFile(t, p)}
			out := filepath.Join(t.TempDir(), "nvidia.json")
			args := append([]string{"cdi", "generate", "--driver-root", root, "--driver-folder=false", "--output", out}, tc.flags...)
			if _, errs, code := gpuctkRun(t, env, args...); code != 0 {
				t.Fatalf("gpuctk cdi generate: %s", errs)
			}
			ours, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			// nvidia-ctk loads NVML without its --library-search-path:
			// on GKE its users give the folder in LD_LIBRARY_PATH. Its
			// --library-search-path is not taken under the driver
			// root, gpuctk's is.
			ctkEnv := append(env, "LD_LIBRARY_PATH="+filepath.Join(root, tc.lib))
			var ctkFlags []string
			if tc.flags != nil {
				ctkFlags = []string{"--library-search-path", filepath.Join(root, tc.lib)}
			}
			theirs := nvidiaCtkGenerate(t, root, ctkEnv, ctkFlags...)
			ourMounts, theirMounts := specMounts(t, ours), specMounts(t, theirs)
			ourFiles := map[string]bool{}
			for _, hp := range ourMounts {
				ourFiles[hp] = true
			}
			for cp, hp := range theirMounts {
				if _, ok := ourMounts[cp]; !ok && !ourFiles[hp] && !strings.Contains(path.Base(hp), "libnvidia-gtk") {
					t.Errorf("nvidia-ctk mounts %s at %s, gpuctk neither the file nor anything there", hp, cp)
				}
			}
			for _, prog := range []string{"nvidia-smi", "nvidia-cuda-mps-control"} {
				hp := ourMounts["/usr/bin/"+prog]
				if want := filepath.Join(root, path.Dir(tc.lib), "bin", prog); hp != want {
					t.Errorf("/usr/bin/%s mounted from %q, want the driver's ELF program %s (nvidia-ctk: %q)", prog, hp, want, theirMounts["/usr/bin/"+prog])
				}
			}
			t.Logf("files mounted: gpuctk %d, nvidia-ctk %d; nvidia-ctk's /usr/bin/nvidia-smi from %q, firmware %q",
				len(ourMounts), len(theirMounts), theirMounts["/usr/bin/nvidia-smi"], theirMounts["/lib/firmware/nvidia/"+p.DriverVersion+"/gsp_ga10x.bin"])
		})
	}
}

// specMounts returns the host path of every mount of a JSON spec, its
// devices' included, by container path.
func specMounts(t *testing.T, data []byte) map[string]string {
	t.Helper()
	type edits struct {
		Mounts []struct{ HostPath, ContainerPath string }
	}
	var spec struct {
		ContainerEdits edits
		Devices        []struct{ ContainerEdits edits }
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	all := []edits{spec.ContainerEdits}
	for _, d := range spec.Devices {
		all = append(all, d.ContainerEdits)
	}
	out := map[string]string{}
	for _, e := range all {
		for _, m := range e.Mounts {
			out[m.ContainerPath] = m.HostPath
		}
	}
	return out
}
