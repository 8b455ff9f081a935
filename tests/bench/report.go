package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report is the table's rows, in order.
type report struct{ rows [][]string }

var header = []string{"Measure (median)", "Baseline", "Baseline", "gpuctk", "Added", "Added, 95% CI", "gpuctk CPU", "Target"}

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if math.Abs(v) < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

// verdict says whether v is within the target (0: no target).
func verdict[T int64 | time.Duration](v, target T, format func(T) string) string {
	switch {
	case target == 0:
		return "—"
	case v <= target:
		return "≤ " + format(target) + ": met"
	default:
		return "≤ " + format(target) + ": **missed**"
	}
}

func mibInt(kib int64) string { return fmt.Sprintf("%d MiB", kib>>10) }
func msInt(d time.Duration) string {
	return fmt.Sprintf("%d ms", d/time.Millisecond)
}

// timed is a process beside its baseline; added is the median of the
// differences between each run and its baseline's run in the same round.
func (r *report) timed(label, baseline string, base, s *sample, target time.Duration) {
	d := pairedDiffs(base, s)
	added := median(d)
	if d == nil {
		added = s.median() - base.median()
	}
	cpu := "—"
	if len(s.cpu) > 0 {
		cpu = ms(median(s.cpu))
	}
	r.rows = append(r.rows, []string{label, baseline, ms(base.median()), ms(s.median()), ms(added), medianCI(d), cpu, verdict(added, target, msInt)})
}

// quantiles is two rows for calls timed in pairs: the medians, with the
// median paired difference and its interval, and the 99th percentiles,
// whose difference counts against the target (a tail the baseline does
// not have is the plugin's).
func (r *report) quantiles(label, baseline string, base, s []time.Duration, target time.Duration) {
	d := pairedDiffs(&sample{times: base}, &sample{times: s})
	r.rows = append(r.rows,
		[]string{label + ", p50", baseline + ", p50", ms(quantile(base, 0.5)), ms(quantile(s, 0.5)), ms(median(d)), medianCI(d), "—", "—"},
		[]string{label + ", p99", baseline + ", p99", ms(quantile(base, 0.99)), ms(quantile(s, 0.99)), ms(quantile(s, 0.99) - quantile(base, 0.99)), "—", "—",
			verdict(quantile(s, 0.99)-quantile(base, 0.99), target, msInt)})
}

// pairedDiffs are the differences between each run of s and the run of
// base in the same round: the machine's load drifts from round to round,
// and a runc create varies by several milliseconds, so the difference of
// two medians would carry the noise of both.
func pairedDiffs(base, s *sample) []time.Duration {
	if len(base.times) != len(s.times) {
		return nil
	}
	d := make([]time.Duration, len(s.times))
	for i := range d {
		d[i] = s.times[i] - base.times[i]
	}
	return d
}

// medianCI is a distribution-free 95% confidence interval for the median
// of d: the order statistics j and k (1-based) with j = n/2 - 0.98 sqrt(n)
// and k = n/2 + 1 + 0.98 sqrt(n), from the normal approximation of the
// binomial count of runs below the median. It says how far a run's noise
// could move the figure: a target inside the interval is met or missed by
// chance.
func medianCI(d []time.Duration) string {
	n := len(d)
	if n < 10 {
		return "—"
	}
	t := slices.Clone(d)
	slices.Sort(t)
	half := 0.98 * math.Sqrt(float64(n))
	j := max(1, int(math.Round(float64(n)/2-half)))
	k := min(n, int(math.Round(float64(n)/2+1+half)))
	return strings.TrimSuffix(ms(t[j-1]), " ms") + " – " + ms(t[k-1])
}

// command is a process whose whole time counts against its target.
func (r *report) command(label, baseline string, base, s *sample, target time.Duration) {
	r.rows = append(r.rows, []string{label, baseline, ms(base.median()), ms(s.median()), ms(s.median() - base.median()), "—", ms(median(s.cpu)), verdict(s.median(), target, msInt)})
}

// memory is a process's peak RSS beside its baseline's.
func (r *report) memory(label, baseline string, base, s *sample, target int64) {
	r.rows = append(r.rows, []string{label, baseline, mib(base.maxRSS), mib(s.maxRSS), "—", "—", "—", verdict(s.maxRSS, target, mibInt)})
}

// function is a Go benchmark: no baseline, the whole figure counts.
func (r *report) function(label string, s *sample, target time.Duration) {
	r.rows = append(r.rows, []string{label, "— (Go benchmark)", "—", ms(s.median()), ms(s.median()), "—", "—", verdict(s.median(), target, msInt)})
}

// missing is a row that could not be measured, and why.
func (r *report) missing(label, baseline, why string, target time.Duration) {
	r.rows = append(r.rows, []string{label, baseline, "—", "not measured: " + why, "—", "—", "—", "≤ " + msInt(target)})
}

func (r *report) markdown() string {
	var b strings.Builder
	row := func(cells []string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	row(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
		if i > 1 {
			sep[i] = "---:"
		}
	}
	row(sep)
	for _, c := range r.rows {
		row(c)
	}
	return b.String()
}

// machine describes where and when the figures were taken.
type machine struct {
	date, cpu, os, kernel, commit, loadStart, runc, goVersion string
	linkCost                                                  string // creating a link in the hook's roots, before the hook rows
	cores                                                     int
}

func describeMachine(o *options) *machine {
	m := &machine{date: time.Now().UTC().Format("2006-01-02"), cores: runtime.NumCPU(), cpu: "unknown CPU", os: runtime.GOOS}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if data, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.os = strings.Trim(v, `"`)
			}
		}
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.kernel = strings.TrimSpace(string(out))
	}
	c := exec.Command("git", "describe", "--always", "--dirty")
	c.Dir = o.repo
	if out, err := c.Output(); err == nil {
		m.commit = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("runc", "--version").Output(); err == nil {
		m.runc, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	m.goVersion = runtime.Version()
	m.loadStart = loadAvg()
	return m
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func (m *machine) String() string {
	return fmt.Sprintf("%d cores (%s), %s, kernel %s, %s, %s", m.cores, m.cpu, m.os, m.kernel, m.runc, m.goVersion)
}

func (m *machine) header() string {
	h := fmt.Sprintf("gpuctk %s, %s\nMachine: %s\nLoad average: %s at the start, %s at the end\n",
		m.commit, m.date, m, m.loadStart, loadAvg())
	if m.linkCost != "" {
		h += "Creating a link in the hook's ext4 roots took " + m.linkCost + " (median) just before the hook rows\n"
	}
	return h
}

// notes say how each kind of figure was taken.
func notes(o *options) string {
	return fmt.Sprintf(`Each process figure is the median of %d runs (after %d untimed), every run
of it beside a run of its baseline in the same round; "Added" is the
median of the differences between each run and its baseline's run in the
same round (the load of the shared machine drifts between rounds); odd
rounds run in the reverse order, so that no job always follows the same
one. "Added, 95%% CI" bounds the median difference (order statistics of
the paired differences): a target inside it is met or missed by chance.
The hook runs with its spec's arguments on a
container root and bundle as runc leaves them for createContainer hooks
(driver libraries in place, the image's own ld.so.cache; config.json is
runc's default spec with the hook in it), put back before each run; its
baseline is a process fed the same state on stdin. "Old way"
is the same hook on the same root with the cache removed, so that it falls
back to the host's ldconfig over the whole image. The spec is a full 580
driver install's (fake files with the driver's names, as the end-to-end
tests use): the hook makes 42 links (20 of the 22 files of the
driver folder that every container gets, and 22 SONAME and .so links)
and one file: the GSP firmware's folder is mounted where the host has
it. With driver-folder = false, runc mounts the 22 files and the hook
makes the 22 other links. On this machine's root ext4 (no journal, a shared virtual
disk) creating one takes from 15 µs to over 600 µs from one run to the
next, for a plain symlink loop as much as for the hook (the figure measured just before the hook
rows is given with the machine). The tmpfs rows give the hook's own cost;
the floor row runs an empty static Go program in the hook's place (Go's
start and exit, which those rows include, as the machine is in that run).
Runtime rows time "create" of a busybox container with the real runc
(deleted after each run, untimed), %d runs each, as a runc create varies
by several milliseconds from run to run; the warm-cache and
emptied-cache creates take %d (%d more rounds of just those and their
baseline); the spec is a standard driver
install's with its mounts pointed at stand-in files. The bundle, runc's
state and gpuctk-runtime's cache of resolved devices are on tmpfs, where
containerd and CRI-O keep them (/run), and so is the container's root:
gpuctk-runtime never touches it, and the disk's noise would only blur the
difference. "Cache emptied": before each run, as after a spec change
another tool made; "after gpuctk cdi generate": generate rewrites the
spec before each run of the pair, runc's too (untimed), filling the cache
as the refresh unit and the device plugin do. The "Container start"
rows (driverfs) are runtime creates too, of GPU 0 of l40s with a full
580 driver on two fake roots in one run: its files as distributions
install them, on the file system of the driver folder (hard links), and
in /usr/local/nvidia/{lib64,bin} on a tmpfs remounted read-only (as a
squashfs), which the spec mounts whole; the third row pairs the two
creates of each round. Go benchmark rows are the
median of %d runs of -benchtime %s each (cdi/bench_test.go). "gpuctk CPU"
is the median user+system time of the measured process and the children it
waited for. Peak memory is the largest max RSS of the runs, from GNU time
(Linux keeps it across exec and takes it over waited-for children).
Device plugin rows run the real gpuctk-device-plugin (simulating
dgx-a100, a fake full 580 driver root) registered with a real standalone kubelet
and containerd (tests/k8s/harness). Allocate: %d calls asking for one
GPU on the plugin's socket, each beside a GetDevicePluginOptions (no
work: the gRPC round trip alone) on the same connection, alternating
which goes first; p99 is the 99th percentile of each, and its target is
on their difference. ListAndWatch is the deviceplugin package's Go
benchmark (open the stream, receive the first message), with the
message's size. Pod start: %d pairs of static pods (busybox, hostNetwork,
imagePullPolicy Never), a plain one and one asking for one nvidia.com/gpu,
alternating which goes first, after one untimed pair; each is timed from
the rename of its manifest into the kubelet's static pod folder to the
timestamp containerd gives its container's first line (the pod status's
startedAt has whole seconds only), and deleted, and gone from the
kubelet's /pods, before the next. The phase rows split each pod's start
at the CRI calls containerd logs for it (RunPodSandbox, CreateContainer
and StartContainer, each when asked and when answered) and pair each
phase of the GPU pod with the same phase of the plain pod of its round:
they show where a device's time goes. The "driver-folder = false" rows
are the same pairs again, once the plugin has reloaded its configuration
with the driver's files mounted one by one. The "journaled ext4" rows are
the same pairs on a second node whose folders (the kubelet's, containerd's
root and state, the pods' logs) are on a journaled ext4 made in a 4 GiB
file and loop-mounted for the run: the bench's disk may be ext4 without a
journal (this VM's is), where a new inode skips every inode deleted in
the last seconds, so that each name runc and the hook add to a
container's layer costs 0.2 to 0.5 ms after the pods the bench deletes;
a node's /var/lib is journaled ext4 or xfs as distributions install it,
and its checkpoint fsync is then a real one.
`, o.runs, o.warm, runtimeRuns(o), 4*runtimeRuns(o), 3*runtimeRuns(o), o.runs, o.benchtime, 100*o.runs, o.pods)
}

// perfSection is the README's performance section.
func perfSection(m *machine, table string, o *options) string {
	return fmt.Sprintf(`## Performance

A container that asks for a GPU pays for one hook process (the library
links and the linker cache in one call), for gpuctk-runtime when it is the
runtime, and for its runtime's reading of the CDI spec. The hook adds the
driver's entries to the image's own /etc/ld.so.cache instead of running
ldconfig over the image, so its cost does not grow with the image; it falls
back to ldconfig only where the cache is missing or in a format it does not
write (the "old way" rows show what that costs). `+"`make bench`"+` measures
it all and prints this table:

%s
Measured %s on %s (a shared CI machine; load average %s at the start; creating a link in the hook's roots took %s just before its rows), gpuctk %s.
%s
To reproduce, as root on Debian: `+"`make bench`"+`. It builds the binaries, prepares a
small root file system (busybox, glibc, ldconfig) and a large one (a copy of
the machine's /usr/lib/x86_64-linux-gnu), prints the table and writes it to
bench.txt; `+"`make bench BENCH_RUNS=50`"+` takes more runs, `+"`make bench BENCH_ONLY=plugin`"+`
only the device plugin rows (`+"`BENCH_PODS=N`"+` sets the pairs
of pods, `+"`BENCH_JOURNAL=false`"+` leaves out the journaled ext4 node).
`, table, m.date, m, m.loadStart, m.linkCost, m.commit, "\n"+notes(o))
}
