package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseValid(t *testing.T) {
	c, err := Parse([]byte(`
[cdi]
vendor = "example.com"

[[sharing]]
devices = ["0", "1g.10gb"]
strategy = "time-slicing"
replicas = 4

[[sharing]]
devices = ["1"]
strategy = "mps"
replicas = 4
active-thread-percentage = 25
pinned-memory-limit = "20GiB"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.CDI.Vendor != "example.com" || c.CDI.Class != "gpu" || c.CDI.HookPath != "/usr/bin/gpuctk-hook" {
		t.Errorf("cdi settings = %+v", c.CDI)
	}
	if len(c.Sharing) != 2 || c.Sharing[1].PinnedMemoryLimit.MiB() != 20*1024 || c.Sharing[1].ActiveThreadPercentage != 25 {
		t.Errorf("sharing = %+v", c.Sharing)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"few replicas", "[[sharing]]\ndevices=[\"0\"]\nstrategy=\"time-slicing\"\nreplicas=1\n", `[[sharing]] entry 1: "replicas" is 1: a shared device needs at least 2 replicas`},
		{"no strategy", "[[sharing]]\ndevices=[\"0\"]\nreplicas=2\n", `"strategy" is missing`},
		{"bad strategy", "[[sharing]]\ndevices=[\"0\"]\nstrategy=\"mig\"\nreplicas=2\n", `"strategy" "mig" is not known`},
		{"no devices", "[[sharing]]\nstrategy=\"mps\"\nreplicas=2\n", `"devices" is empty`},
		{"mps keys on time-slicing", "[[sharing]]\ndevices=[\"0\"]\nstrategy=\"time-slicing\"\nreplicas=2\nactive-thread-percentage=10\n", "apply only to strategy"},
		// Every MPS replica binds its daemon's pipe folder at
		// /tmp/nvidia-mps: a container given replicas of two devices
		// would reach one daemon only.
		{"mps replicas more than one", "[[sharing]]\ndevices=[\"0\", \"1\"]\nstrategy=\"mps\"\nreplicas=2\nfail-requests-greater-than-one=false\n", `[[sharing]] entry 1: "fail-requests-greater-than-one" = false cannot apply to strategy "mps"`},
		{"percentage", "[[sharing]]\ndevices=[\"0\"]\nstrategy=\"mps\"\nreplicas=2\nactive-thread-percentage=101\n", "from 1 to 100"},
		{"bad size", "[[sharing]]\ndevices=[\"0\"]\nstrategy=\"mps\"\nreplicas=2\npinned-memory-limit=\"lots\"\n", `size "lots" is not valid`},
		{"no replica names", "[cdi]\nreplica-names = []\n", `[cdi] "replica-names" is empty: list at least one style of name (use "index", "uuid", "gpu:mig" or "type-index")`},
		{"unknown replica name", "[cdi]\nreplica-names = [\"index\", \"serial\"]\n", `[cdi] "replica-names" value "serial" is not known: use "index", "uuid", "gpu:mig" or "type-index"`},
		{"unknown device name style", "[cdi]\ndevice-names = [\"serial\"]\n", `[cdi] "device-names" value "serial" is not known: use "index", "uuid", "gpu:mig" or "type-index"`},
		{"no device names", "[cdi]\ndevice-names = []\n", `[cdi] "device-names" is empty`},
		{"replica names not a list", "[cdi]\nreplica-names = \"index\"\n", "line 2"},
		{"unknown key", "[cdi]\nvendr = \"x\"\n", `line 2 column 1: unknown key "cdi.vendr"`},
		{"syntax", "[[sharing]\n", "line 1"},
		// gpuctk-runtime runs in the bundle's folder: a relative path
		// would put its cache and log in every container's bundle.
		{"relative library search path", "[cdi]\nlibrary-search-paths = [\"/home/kubernetes/bin/nvidia/lib64\", \"lib64\"]\n", `"library-search-paths" holds "lib64", not an absolute path`},
		{"relative cache-dir", "[runtime]\ncache-dir = \"runtime-cache\"\n", `[runtime] "cache-dir" "runtime-cache" is not an absolute path`},
		{"relative log-file", "[runtime]\nlog-file = \"gpuctk-runtime.log\"\n", `[runtime] "log-file" "gpuctk-runtime.log" is not an absolute path`},
		{"dra driver-name", "[dra]\ndriver-name = \"GPU.example\"\n", `[dra] driver-name "GPU.example" is not a DNS subdomain of at most 63 characters (lower-case letters, digits, '-' and '.'): use a domain of yours such as gpu.example.com`},
		{"dra empty label", "[dra]\ndriver-name = \"gpu..example.com\"\n", `[dra] driver-name "gpu..example.com" is not a DNS subdomain`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestReplicaNames(t *testing.T) {
	for _, tc := range []struct {
		name, toml string
		want       []string
	}{
		{"default", "", []string{"index"}},
		{"default with a [cdi] section", "[cdi]\nvendor = \"example.com\"\n", []string{"index"}},
		{"one", "[cdi]\nreplica-names = [\"uuid\"]\n", []string{"uuid"}},
		{"all three", "[cdi]\nreplica-names = [\"gpu:mig\", \"uuid\", \"index\"]\n", []string{"gpu:mig", "uuid", "index"}},
		{"duplicates", "[cdi]\nreplica-names = [\"uuid\", \"uuid\"]\n", []string{"uuid", "uuid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.toml))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.CDI.ReplicaNames, tc.want) {
				t.Errorf("replica-names = %q, want %q", c.CDI.ReplicaNames, tc.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.toml")
	if c, err := Load(missing, false); err != nil || c.CDI.Vendor != "nvidia.com" {
		t.Fatalf("missing default file: %v, %+v", err, c)
	}
	if _, err := Load(missing, true); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing explicit file: err = %v", err)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[[sharing]]\nreplicas = \"x\"\n"), 0o644)
	if _, err := Load(bad, true); err == nil || !strings.HasPrefix(err.Error(), "config "+bad+": line 2") {
		t.Fatalf("bad file: err = %v", err)
	}
	// Bounded: a device or a huge file is refused, not read to the end.
	huge := filepath.Join(dir, "huge.toml")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, MaxFileSize+1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/dev/zero", huge} {
		if _, err := Load(p, true); err == nil || err.Error() != "config "+p+": read "+p+": more than 4 MiB, too large for this file: check the path" {
			t.Errorf("Load(%s): err = %v", p, err)
		}
	}
	// A FIFO, as a shell's <(...) gives, is read to its end.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.WriteString("[cdi]\nvendor = \"example.com\"\n")
			f.Close()
		}
	}()
	if c, err := Load(fifo, true); err != nil || c.CDI.Vendor != "example.com" {
		t.Errorf("Load(FIFO) = %+v, %v", c, err)
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[string]Size{"20GiB": 20 << 30, "512MiB": 512 << 20, "1024": 1024, "2G": 2 << 30, "3 MiB": 3 << 20} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1GiB", "1.5GiB", "99999999999999TiB", "GiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
	if b, _ := Size(20 << 30).MarshalText(); string(b) != "20GiB" {
		t.Errorf("MarshalText = %s", b)
	}
}

// TestLoadWatched: a daemon's config swapped for a FIFO (no writer) or a
// device is refused at once, in one line; a regular file reads as Load's.
func TestLoadWatched(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "config.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for p, want := range map[string]string{
		fifo:        "config " + fifo + ": read " + fifo + ": a FIFO, not a regular file",
		"/dev/zero": "config /dev/zero: read /dev/zero: a character device, not a regular file",
	} {
		if _, err := LoadWatched(p, false); err == nil || err.Error() != want {
			t.Errorf("LoadWatched(%s): err = %v, want %q", p, err, want)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("[cdi]\nvendor = \"example.com\"\n"), 0o644)
	if c, err := LoadWatched(good, true); err != nil || c.CDI.Vendor != "example.com" || c.Path != good {
		t.Errorf("LoadWatched(good) = %+v, %v", c, err)
	}
	if c, err := LoadWatched(filepath.Join(dir, "none"), false); err != nil || c.CDI.Vendor != "nvidia.com" {
		t.Errorf("missing default: %v", err)
	}
}
