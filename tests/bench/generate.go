package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// largestProfile is the largest simulated host: 8 GPUs, each split 7 x
// 1g.10gb; sharingAll shares every device 8 ways, as the cdi package's
// benchmarks do.
const (
	largestProfile = "dgx-h100-mig"
	sharingAll     = "[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 8\n"
)

// gpuSizes are the host sizes of the generate curve.
var gpuSizes = []int{1, 2, 4, 8}

// cutProfile writes the largest profile cut to its first n GPUs, as a
// profile file `--simulate` takes.
func cutProfile(repo, dir string, n int) (string, error) {
	data, err := os.ReadFile(filepath.Join(repo, "inventory/profiles", largestProfile+".toml"))
	if err != nil {
		return "", fmt.Errorf("the largest profile: %w (run from the repository root or pass -repo)", err)
	}
	parts := strings.Split(string(data), "\n[[gpu]]\n")
	if len(parts) <= n {
		return "", fmt.Errorf("profile %s has %d GPUs, want %d", largestProfile, len(parts)-1, n)
	}
	p := filepath.Join(dir, fmt.Sprintf("%s-%dgpu.toml", largestProfile, n))
	return p, os.WriteFile(p, []byte(strings.Join(parts[:n+1], "\n[[gpu]]\n")), 0o644)
}

// specStats returns the number of devices and the size of a YAML spec.
func specStats(path string) (devices int, kib int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	return bytes.Count(data, []byte("\n  - name: ")), len(data) / 1024, nil
}

// goBench runs the cdi package's generate and resolve benchmarks count
// times each and returns the ns/op of every run by benchmark name
// ("BenchmarkGenerate/gpus=1"). Each run is itself a mean over the
// iterations that fit in benchtime.
func goBench(repo string, count int, benchtime string) (map[string][]time.Duration, error) {
	m, err := goBenchMetrics(repo, "./cdi/", "^(BenchmarkGenerate|BenchmarkResolve)$", count, benchtime)
	if err != nil {
		return nil, err
	}
	res := map[string][]time.Duration{}
	for name, units := range m {
		for _, ns := range units["ns/op"] {
			res[name] = append(res[name], time.Duration(ns))
		}
	}
	return res, nil
}

// goBenchMetrics runs the benchmarks of pkg matching pattern count times
// each and returns every run's figures by benchmark name and unit
// ("ns/op", and those the benchmark reports itself, e.g. "bytes/msg").
func goBenchMetrics(repo, pkg, pattern string, count int, benchtime string) (map[string]map[string][]float64, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", pattern,
		"-count", strconv.Itoa(count), "-benchtime", benchtime, pkg)
	cmd.Dir = repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go test -bench %s: %v\n%s", pkg, err, out.String())
	}
	// NAME[-PROCS] ITERATIONS then pairs of VALUE UNIT.
	line := regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)
	res := map[string]map[string][]float64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if res[m[1]] == nil {
				res[m[1]] = map[string][]float64{}
			}
			res[m[1]][f[i+1]] = append(res[m[1]][f[i+1]], v)
		}
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("go test -bench %s printed no benchmark:\n%s", pkg, out.String())
	}
	return res, nil
}
