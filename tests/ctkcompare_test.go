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
	ctk := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs /proc/driver && mkdir /proc/driver/nvidia-caps && cp "$1" /proc/driver/nvidia-caps/mig-minors && shift && exec "$@"`,
		"sh", filepath.Join(root, "proc/driver/nvidia-caps/mig-minors"),
		tool(t, "nvidia-ctk"), "cdi", "generate", "--format", "json", "--mode", "nvml", "--driver-root", root, "--dev-root", root)
	ctk.Env = append(os.Environ(), env...)
	var theirs, ctkErr strings.Builder
	ctk.Stdout, ctk.Stderr = &theirs, &ctkErr
	if err := ctk.Run(); err != nil {
		t.Fatalf("nvidia-ctk cdi generate: %v\n%s", err, ctkErr.String())
	}
	spec, err := os.ReadFile(ours)
	if err != nil {
		t.Fatal(err)
	}
	isCap := func(n string) bool { return strings.HasPrefix(n, "capability-") }
	with := countSpec(t, spec, func(string) bool { return true }, true)
	without := countSpec(t, spec, func(n string) bool { return !isCap(n) }, true)
	nv := countSpec(t, []byte(theirs.String()), func(string) bool { return true }, false)
	t.Logf("host files / device nodes / links, every device of 8 GPUs: gpuctk with every capability device %d/%d/%d, without %d/%d/%d; nvidia-ctk %d/%d/%d",
		with.files, with.nodes, with.links, without.files, without.nodes, without.links, nv.files, nv.nodes, nv.links)
	if with.files < nv.files || with.nodes < nv.nodes {
		t.Errorf("gpuctk with every capability device gives fewer files or nodes than nvidia-ctk")
	}
}
