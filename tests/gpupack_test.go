package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGPUPack builds what tests/gpu/smoke.sh carries to a bare GPU machine
// and runs the smoke test from the pack as it runs there: no container
// engine on PATH, gpuctk-runtime over the packed static runc. Without a GPU
// it is the dry run of a simulated host, and the start-time baseline (a
// container without a GPU) runs for real from the packed root.
func TestGPUPack(t *testing.T) {
	pack := filepath.Join(t.TempDir(), "gpu")
	cmd := exec.Command("tests/gpu/pack.sh", pack)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "BIN="+binDir, "RUNC="+tool(t, "runc-static"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pack.sh: %v\n%s", err, out)
	}

	// What a machine without a compiler, a container engine or a Go
	// toolchain runs must not need this machine's libraries.
	for _, b := range []string{"bin/runc", "bin/ocibundle", "bin/gpuctk-hook", "bin/gpuctk-runtime", "rootfs/bin/busybox"} {
		out := run(t, "file", "-L", filepath.Join(pack, b))
		if !strings.Contains(out, "statically linked") {
			t.Errorf("%s is not static: %s", b, out)
		}
	}
	conf, err := os.ReadFile(filepath.Join(pack, "rootfs/etc/ld.so.conf"))
	if err != nil || !strings.Contains(string(conf), "include /etc/ld.so.conf.d/*.conf") {
		t.Errorf("rootfs/etc/ld.so.conf = %q (%v): want the include of ld.so.conf.d that the hook's drop-ins rely on", conf, err)
	}

	// A bare PATH: no podman; the pack's own runc is the engine.
	smoke := exec.Command("bash", filepath.Join(pack, "smoke.sh"), "--simulate", "dgx-a100", "--runs", "2")
	smoke.Env = []string{"PATH=" + bareUtilsPath(t), "HOME=/root"}
	out, err := smoke.CombinedOutput()
	if err != nil {
		t.Fatalf("smoke.sh from the pack: %v\n%s", err, out)
	}
	for _, want := range []string{
		"whole GPU, index          NVIDIA_VISIBLE_DEVICES=0",
		"whole GPU, UUID           NVIDIA_VISIBLE_DEVICES=GPU-13fe3248-4da8-65f8-e972-3f15eef51793",
		"whole GPU, annotation     annotation cdi.k8s.io/gpuctk-smoke=nvidia.com/gpu=0",
		"all GPUs                  NVIDIA_VISIBLE_DEVICES=all",
		"MIG device                NVIDIA_VISIBLE_DEVICES=mig-0",
		"time-sliced replica       NVIDIA_VISIBLE_DEVICES=0::1",
		"MPS replica (25%, 1 GiB)  NVIDIA_VISIBLE_DEVICES=0::1",
		"start, no GPU             runc",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("smoke.sh from the pack: no row %q in\n%s", want, out)
		}
	}
}

// bareUtilsPath is a PATH of the shell tools smoke.sh uses (coreutils,
// grep, sed, awk, mktemp) and nothing else: no podman, runc, gcc or go,
// as on a GPU machine that has only a driver.
func bareUtilsPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"bash", "cat", "cp", "date", "dirname", "grep", "id", "ls", "mkdir", "mktemp", "rm", "sed", "awk", "sort", "tr", "seq", "sleep", "tail", "head", "basename", "env"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
