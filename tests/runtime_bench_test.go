package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkRuntimeCreate times `create` then `delete` of one busybox
// container, whole processes, three ways: plain runc; runc on the
// config.json that gpuctk-runtime writes for NVIDIA_VISIBLE_DEVICES=mig-0
// (the same container, edits made beforehand); and gpuctk-runtime making
// those edits then exec'ing runc. The last two differ by what the runtime
// adds. Then the same without runc's noise: /bin/true as the real runtime,
// directly and through gpuctk-runtime, with its cache of resolved devices
// and without. Each reports the median of create+delete in ms/median and
// of create alone in create-ms/median.
//
//	go test -run '^$' -bench RuntimeCreate -benchtime 200x ./tests
func BenchmarkRuntimeCreate(b *testing.B) {
	driverRoot, _ := fakeDriverRoot(b, "dgx-a100")
	vendor := uniqueVendor()
	settings := func(runtimes, cacheDir string) string {
		return writeConfig(b, fmt.Sprintf("[cdi]\nvendor = %q\n[runtime]\nruntimes = [%q]\nlog-file = %q\ncache-dir = %q\n",
			vendor, runtimes, filepath.Join(b.TempDir(), "log"), cacheDir))
	}
	cfg := settings("runc", filepath.Join(b.TempDir(), "cache"))
	run(b, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-a100", "--driver-root", driverRoot,
		"--hook-path", bin("gpuctk-hook"), "--output", systemSpecPath(b, vendor), "--config", cfg)
	rootfs := busyboxRoot(b, true)

	bundle := b.TempDir()
	run(b, "runc", "spec", "--bundle", bundle)
	config := filepath.Join(bundle, "config.json")
	var spec map[string]any
	data, _ := os.ReadFile(config)
	json.Unmarshal(data, &spec)
	spec["root"] = map[string]any{"path": rootfs}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/sleep", "60"}
	plain, _ := json.Marshal(spec)
	proc["env"] = append(slices.Clone(toStrings(proc["env"])), "NVIDIA_VISIBLE_DEVICES=mig-0")
	requested, _ := json.Marshal(spec)

	// The edited config.json, as gpuctk-runtime writes it.
	os.WriteFile(config, requested, 0o644)
	root := b.TempDir()
	env := append(os.Environ(), "GPUCTK_CONFIG="+cfg)
	out := filepath.Join(b.TempDir(), "out")
	// runc create hands its stdio to the container, which holds it until
	// delete: a file, not a pipe, or the wait never ends.
	runtime := func(binary string, args ...string) error {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd := exec.Command(binary, append([]string{"--root", root}, args...)...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, f, f
		if err := cmd.Run(); err != nil {
			msg, _ := os.ReadFile(out)
			return fmt.Errorf("%s %v: %w\n%s", binary, args, err, msg)
		}
		return nil
	}
	id := fmt.Sprintf("gpuctk-bench-%d", time.Now().UnixNano())
	if err := runtime(bin("gpuctk-runtime"), "create", "--bundle", bundle, id); err != nil {
		b.Fatal(err)
	}
	if err := runtime("runc", "delete", "--force", id); err != nil {
		b.Fatal(err)
	}
	injected, _ := os.ReadFile(config)

	// The runtime's own cost, free of runc's noise: /bin/true as the real
	// runtime, called directly or through gpuctk-runtime.
	trueCfg := settings("/bin/true", filepath.Join(b.TempDir(), "cache"))
	// A cache dir that cannot be made: every create parses the specs.
	trueNoCache := settings("/bin/true", "/dev/null/cache")
	for _, bc := range []struct {
		name   string
		binary string
		config []byte
		cfg    string
	}{
		{"runc", "runc", plain, cfg},
		{"runc-injected", "runc", injected, cfg},
		{"gpuctk-runtime", bin("gpuctk-runtime"), requested, cfg},
		{"true", "/bin/true", requested, trueCfg},
		{"gpuctk-runtime-true", bin("gpuctk-runtime"), requested, trueCfg},
		{"gpuctk-runtime-true-nocache", bin("gpuctk-runtime"), requested, trueNoCache},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var times, creates []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if err := os.WriteFile(config, bc.config, 0o644); err != nil {
					b.Fatal(err)
				}
				id := fmt.Sprintf("%s-%d", id, i)
				env = append(os.Environ(), "GPUCTK_CONFIG="+bc.cfg)
				b.StartTimer()
				start := time.Now()
				if err := runtime(bc.binary, "create", "--bundle", bundle, id); err != nil {
					runtime("runc", "delete", "--force", id)
					b.Fatal(err)
				}
				creates = append(creates, time.Since(start))
				if err := runtime(bc.binary, "delete", "--force", id); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
			}
			b.ReportMetric(median(times), "ms/median")
			b.ReportMetric(median(creates), "create-ms/median")
		})
	}
}

func median(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds()) / 1000
}

func toStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}
