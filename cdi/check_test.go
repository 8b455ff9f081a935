package cdi

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/inventory"
	"github.com/gpuctk/gpuctk/offer"
	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// specOf builds the YAML spec of a profile with the default configuration
// and the given driver files (a standard install when nil).
func specOf(t *testing.T, p *inventory.Profile, f *driver.Files) []byte {
	t.Helper()
	h, err := p.Host()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	set, err := offer.Resolve(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f == nil {
		f = driver.Standard(p.DriverVersion, p.UVMMajor, p.CapsMajor)
	}
	data, _, _, err := Build(set, f, cfg, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func loadProfile(t *testing.T, name string) *inventory.Profile {
	t.Helper()
	p, err := inventory.LoadProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func staleLines(st []Stale) []string {
	var out []string
	for _, s := range st {
		out = append(out, s.String())
	}
	return out
}

func checkLines(t *testing.T, got []Stale, want []string) {
	t.Helper()
	lines := staleLines(got)
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("stale lines:\n got %q\nwant %q", lines, want)
	}
}

// TestCheckSimulated checks specs written for a simulated host against the
// host after a change: each change gives the lines a user reads.
func TestCheckSimulated(t *testing.T) {
	const spec = "/etc/cdi/nvidia.yaml"
	tests := []struct {
		name    string
		profile string
		// before changes the profile the spec on disk was written for;
		// the host now is the embedded profile.
		before func(p *inventory.Profile)
		want   []string
	}{
		{"fresh", "dgx-a100", func(*inventory.Profile) {}, nil},
		{"driver upgraded", "l40s", func(p *inventory.Profile) { p.DriverVersion = "570.86.15" }, []string{
			spec + ": common edits: driver 570.86.15 in the spec, 580.65.06 on the host (29 of the driver's files and links differ)",
		}},
		{"nvidia-uvm major changed", "l40s", func(p *inventory.Profile) { p.UVMMajor = 500 }, []string{
			spec + ": common edits: device node /dev/nvidia-uvm: c 500:0 in the spec, c 510:0 on the host",
			spec + ": common edits: device node /dev/nvidia-uvm-tools: c 500:1 in the spec, c 510:1 on the host",
		}},
		{"GPU removed", "l40s", func(p *inventory.Profile) {
			p.GPUs = append(p.GPUs, inventory.GPU{Index: 4, Minor: 4, UUID: "GPU-00000000-0000-0000-0000-000000000004", Name: "NVIDIA L40S", MemoryMiB: 46068, ComputeCapability: "8.9"})
		}, []string{
			spec + ": device 4, GPU-00000000-0000-0000-0000-000000000004: in the spec, not on the host (a GPU or MIG device removed, its UUID changed, or sharing changed)",
		}},
		{"GPU added", "l40s", func(p *inventory.Profile) { p.GPUs = p.GPUs[:3] }, []string{
			// The one hook call lists every GPU's DRM by-path links.
			spec + ": common edits: createContainer hook /usr/bin/gpuctk-hook: arguments differ: only today's has ../card4::/dev/dri/by-path/pci-0000:c1:00.0-card ../renderD131::/dev/dri/by-path/pci-0000:c1:00.0-render",
			spec + ": device 3, GPU-" + "%s: on the host, not in the spec (a GPU or MIG device added, its UUID changed, or sharing changed)",
		}},
		{"MIG device added", "h100", func(p *inventory.Profile) { p.GPUs[0].MIG = p.GPUs[0].MIG[:6] }, []string{
			spec + ": device mig-6, 0:6, MIG-%s: on the host, not in the spec (a GPU or MIG device added, its UUID changed, or sharing changed)",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := loadProfile(t, tc.profile)
			before := loadProfile(t, tc.profile)
			tc.before(before)
			got, err := Check(spec, specOf(t, before, nil), specOf(t, now, nil), HostFiles{})
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string(nil), tc.want...)
			for i, w := range want {
				// The new device's UUID, from the profile.
				switch {
				case strings.Contains(w, "GPU-%s"):
					want[i] = fmt.Sprintf(strings.Replace(w, "GPU-%s", "%s", 1), now.GPUs[3].UUID)
				case strings.Contains(w, "MIG-%s"):
					want[i] = fmt.Sprintf(strings.Replace(w, "MIG-%s", "%s", 1), now.GPUs[0].MIG[6].UUID)
				}
			}
			checkLines(t, got, want)
		})
	}
}

// TestCheckFormats checks that only what containers get counts: the JSON
// of a fresh spec is fresh, a spec that does not parse is stale.
func TestCheckFormats(t *testing.T) {
	p := loadProfile(t, "h100")
	h, _ := p.Host()
	cfg := config.Default()
	set, err := offer.Resolve(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := driver.Standard(p.DriverVersion, p.UVMMajor, p.CapsMajor)
	js, _, _, err := Build(set, f, cfg, "json")
	if err != nil {
		t.Fatal(err)
	}
	want := specOf(t, p, nil)
	got, err := Check("s.json", js, want, HostFiles{})
	if err != nil || len(got) != 0 {
		t.Errorf("the JSON of the same spec: %q, %v; want fresh", staleLines(got), err)
	}
	// A planted spec with 80,000 differences: bounded time, bounded lines.
	var b strings.Builder
	// The driver's version, so the differences are not folded into one line.
	b.WriteString(Marker + "\n---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n" +
		"  mounts: [{hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so." + p.DriverVersion + ", containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so." + p.DriverVersion + "}]\n  env:\n")
	for i := 0; i < 80000; i++ {
		fmt.Fprintf(&b, "  - X%d=1\n", i)
	}
	b.WriteString("devices: []\n")
	start := time.Now()
	got, err = Check("big.yaml", []byte(b.String()), want, HostFiles{})
	if err != nil || len(got) != maxStale || got[maxStale-1].What == "" || !strings.HasPrefix(got[maxStale-1].What, "and ") || time.Since(start) > 10*time.Second {
		t.Errorf("a spec of 80,000 environment variables: %d lines, %v, in %v; want %d lines, the last counting the rest, within 10 s", len(got), err, time.Since(start), maxStale)
	}
	// A spec whose edits are the host's but that CDI runtimes refuse
	// (here a device twice, as a hand edit or an append leaves it) is
	// stale: before, it was fresh, and --if-stale never replaced it.
	all := strings.Index(string(want), `  - name: "all"`)
	next := all + 1 + strings.Index(string(want[all+1:]), "  - name: ")
	dup := string(want[:next]) + string(want[all:])
	got, err = Check("dup.yaml", []byte(dup), want, HostFiles{})
	if err != nil || len(got) != 1 || got[0].String() != `dup.yaml: common edits: CDI runtimes refuse it: invalid spec: device "all" appears twice` {
		t.Errorf("a spec with a device twice: %q, %v; want one line saying runtimes refuse it", staleLines(got), err)
	}
	got, err = Check("s.yaml", []byte(Marker+"\n---\ncdiVersion: [\n"), want, HostFiles{})
	if err != nil || len(got) != 1 || !strings.HasPrefix(got[0].String(), "s.yaml: common edits: does not parse (") {
		t.Errorf("a broken spec: %q, %v; want one line saying it does not parse", staleLines(got), err)
	}
}

// TestCheckFakeRoot checks a spec written for a fake driver root against
// the root after a change on the host: a device node renumbered, a
// library removed.
func TestCheckFakeRoot(t *testing.T) {
	fakehost.RequireRoot(t, "mknod for the fake driver root's device nodes")
	const spec = "/var/run/cdi/nvidia.yaml"
	tests := []struct {
		name   string
		change func(t *testing.T, root string, p *inventory.Profile)
		want   func(root string, p *inventory.Profile) []string
	}{
		{"fresh", func(*testing.T, string, *inventory.Profile) {}, func(string, *inventory.Profile) []string { return nil }},
		{"GPU node minor changed", func(t *testing.T, root string, _ *inventory.Profile) {
			n := filepath.Join(root, "dev/nvidia1")
			if err := os.Remove(n); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mknod(n, unix.S_IFCHR|0o666, int(unix.Mkdev(195, 9))); err != nil {
				t.Fatal(err)
			}
		}, func(root string, _ *inventory.Profile) []string {
			node := "device node /dev/nvidia1: c 195:1 from " + root + "/dev/nvidia1 in the spec, c 195:9 from " + root + "/dev/nvidia1 on the host"
			return []string{
				spec + ": device 1, GPU-" + "%s: " + node,
			}
		}},
		{"library removed", func(t *testing.T, root string, p *inventory.Profile) {
			for _, f := range []string{"libnvidia-nvvm.so." + p.DriverVersion, "libnvidia-nvvm.so.4"} {
				if err := os.Remove(filepath.Join(root, fakehost.LibDir, f)); err != nil {
					t.Fatal(err)
				}
			}
		}, func(root string, p *inventory.Profile) []string {
			lib := root + fakehost.LibDir + "/libnvidia-nvvm.so." + p.DriverVersion
			return []string{
				spec + ": common edits: library " + fakehost.LibDir + "/libnvidia-nvvm.so." + p.DriverVersion + ": in the spec, no longer offered (" + lib + " does not exist)",
				spec + ": common edits: createContainer hook /usr/bin/gpuctk-hook: arguments differ: only the spec's call has " + fakehost.LibDir + "/libnvidia-nvvm.so " + fakehost.LibDir + "/libnvidia-nvvm.so.4 libnvidia-nvvm.so.4::" + fakehost.LibDir + "/libnvidia-nvvm.so and 1 more",
			}
		}},
		{"library replaced by a folder", func(t *testing.T, root string, p *inventory.Profile) {
			lib := filepath.Join(root, fakehost.LibDir, "libnvidia-nvvm.so."+p.DriverVersion)
			if err := os.Remove(lib); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(lib, 0o755); err != nil {
				t.Fatal(err)
			}
		}, func(root string, p *inventory.Profile) []string {
			lib := root + fakehost.LibDir + "/libnvidia-nvvm.so." + p.DriverVersion
			return []string{
				spec + ": common edits: library " + fakehost.LibDir + "/libnvidia-nvvm.so." + p.DriverVersion + ": in the spec, no longer offered (" + lib + " is now a folder)",
				spec + ": common edits: createContainer hook /usr/bin/gpuctk-hook: arguments differ: only the spec's call has " + fakehost.LibDir + "/libnvidia-nvvm.so " + fakehost.LibDir + "/libnvidia-nvvm.so.4 libnvidia-nvvm.so.4::" + fakehost.LibDir + "/libnvidia-nvvm.so and 1 more",
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := loadProfile(t, "l40s")
			root := filepath.Join(t.TempDir(), "root")
			if err := fakehost.Build(root, p); err != nil {
				t.Fatal(err)
			}
			discover := func() []byte {
				f, err := driver.Discover(root, root, p.DriverVersion)
				if err != nil {
					t.Fatal(err)
				}
				return specOf(t, p, f)
			}
			before := discover()
			tc.change(t, root, p)
			got, err := Check(spec, before, discover(), HostFiles{DriverRoot: root, DevRoot: root})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want(root, p)
			for i, w := range want {
				if strings.Contains(w, "GPU-%s") {
					want[i] = fmt.Sprintf(strings.Replace(w, "GPU-%s", "%s", 1), p.GPUs[1].UUID)
				}
			}
			checkLines(t, got, want)
		})
	}
}

// TestOwnSpecs checks which files of the spec dirs are judged: gpuctk's
// specs of the kind; others are notes, unreadable or huge ones errors,
// and nothing blocks or follows a link.
func TestOwnSpecs(t *testing.T) {
	dir := t.TempDir()
	own := specOf(t, loadProfile(t, "h100"), nil)
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nvidia.yaml", own)
	write("other-kind.yaml", []byte(strings.Replace(string(own), `kind: "nvidia.com/gpu"`, `kind: "example.com/gpu"`, 1)))
	write("foreign.yaml", []byte("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"))
	write("readme.txt", []byte("not a spec"))
	write("nvidia.json", []byte(`{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": []}`))
	if err := unix.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nvidia.yaml"), filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	huge, err := os.Create(filepath.Join(dir, "huge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	huge.WriteString(Marker + "\n")
	if err := huge.Truncate(2 << 30); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	huge.Close()

	got, notes, errs := OwnSpecs([]string{dir, filepath.Join(dir, "missing")}, "nvidia.com/gpu")
	if len(got) != 1 || got[0].Path != filepath.Join(dir, "nvidia.yaml") || string(got[0].Data) != string(own) {
		t.Errorf("own specs: %d, want only nvidia.yaml with its bytes", len(got))
	}
	wantNotes := []string{
		dir + "/fifo.yaml: not checked: a FIFO; gpuctk writes regular files",
		dir + `/foreign.yaml: not checked: not written by gpuctk (no "# Written by gpuctk." first line)`,
		dir + "/link.yaml: not checked: a symbolic link; gpuctk writes regular files",
		dir + `/nvidia.json: not checked: a JSON spec has no "# Written by gpuctk." line to tell gpuctk's from another tool's`,
		dir + "/other-kind.yaml: not checked: its kind is example.com/gpu, the configuration's is nvidia.com/gpu",
	}
	if strings.Join(notes, "\n") != strings.Join(wantNotes, "\n") {
		t.Errorf("notes:\n got %q\nwant %q", notes, wantNotes)
	}
	if got, want := ForeignSpecs([]string{dir}, "nvidia.com/gpu"), []string{dir + "/foreign.yaml"}; !slices.Equal(got, want) {
		t.Errorf("foreign specs %q, want %q", got, want)
	}
	wantErr := fmt.Sprintf("spec %s/huge.yaml: 2147483648 bytes, over the 8 MiB a spec may have: remove it, or regenerate it", dir)
	if len(errs) != 1 || errs[0].Error() != wantErr {
		t.Errorf("errors: %v, want %q", errs, wantErr)
	}
}
