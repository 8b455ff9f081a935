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
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^(BenchmarkGenerate|BenchmarkResolve)$",
		"-count", strconv.Itoa(count), "-benchtime", benchtime, "./cdi/")
	cmd.Dir = repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go test -bench ./cdi: %v\n%s", err, out.String())
	}
	line := regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+([0-9.]+) ns/op`)
	res := map[string][]time.Duration{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(m[3], 64)
		res[m[1]] = append(res[m[1]], time.Duration(ns))
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("go test -bench ./cdi printed no benchmark:\n%s", out.String())
	}
	return res, nil
}
