package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sample is what the runs of one job measured.
type sample struct {
	times  []time.Duration // wall
	cpu    []time.Duration // user + system, children included
	maxRSS int64           // KiB, the largest of the runs (memory jobs only)
}

func median(d []time.Duration) time.Duration {
	t := slices.Clone(d)
	slices.Sort(t)
	if len(t) == 0 {
		return 0
	}
	if len(t)%2 == 1 {
		return t[len(t)/2]
	}
	return (t[len(t)/2-1] + t[len(t)/2]) / 2
}

func (s *sample) median() time.Duration { return median(s.times) }

// join is s's runs followed by t's: a job's runs from two sets of rounds,
// kept in round order so that pairs with its baseline's stay pairs.
func (s *sample) join(t *sample) *sample {
	return &sample{
		times:  append(slices.Clone(s.times), t.times...),
		cpu:    append(slices.Clone(s.cpu), t.cpu...),
		maxRSS: max(s.maxRSS, t.maxRSS),
	}
}

// job is what one run does: commands run one after the other. prepare
// runs before each run, untimed, to put back what the previous run
// changed, and may return the commands to run (nil: cmds). stdin, when
// set, is a file every command reads as its standard input, directly, as
// a hook reads the state runc gives it.
type job struct {
	name    string
	prepare func() ([][]string, error)
	cleanup func() error // after each run, untimed
	cmds    [][]string
	stdin   string
	env     []string // nil: this process's environment
	// memory runs each command under GNU time for its peak RSS. Go starts
	// children with vfork, and Linux counts the parent's peak in a vforked
	// child's ru_maxrss at exec, so wait4's figure would be this harness's;
	// time forks, and its own few hundred KiB are all it adds.
	memory bool
}

// interleave runs every job once per round, warm rounds first and
// untimed, so that a job and its baseline see the same machine: the
// machine is shared and its load drifts. Odd rounds run the jobs in the
// reverse order, so that no job always follows the same one: a run can
// leave work behind for the next (runc's deleted container is still being
// torn down).
func interleave(rounds, warm int, jobs ...job) ([]*sample, error) {
	out := make([]*sample, len(jobs))
	for i := range out {
		out[i] = &sample{}
	}
	for r := 0; r < warm+rounds; r++ {
		for k := range jobs {
			i := k
			if r%2 == 1 {
				i = len(jobs) - 1 - k
			}
			j := jobs[i]
			cmds := j.cmds
			if j.prepare != nil {
				c, err := j.prepare()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", j.name, err)
				}
				if c != nil {
					cmds = c
				}
			}
			m, err := j.run(cmds)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", j.name, err)
			}
			if j.cleanup != nil {
				if err := j.cleanup(); err != nil {
					return nil, fmt.Errorf("%s: %w", j.name, err)
				}
			}
			if r < warm {
				continue
			}
			out[i].times = append(out[i].times, m.wall)
			out[i].cpu = append(out[i].cpu, m.cpu)
			out[i].maxRSS = max(out[i].maxRSS, m.rss)
		}
	}
	return out, nil
}

type measured struct {
	wall, cpu time.Duration
	rss       int64
}

func (j job) run(cmds [][]string) (measured, error) {
	var total measured
	for _, args := range cmds {
		var rssFile string
		if j.memory {
			f, err := os.CreateTemp("", "bench-rss-")
			if err != nil {
				return total, err
			}
			f.Close()
			rssFile = f.Name()
			defer os.Remove(rssFile)
			args = append([]string{"/usr/bin/time", "-f", "%M", "-o", rssFile}, args...)
		}
		c := exec.Command(args[0], args[1:]...)
		c.Env = j.env
		if j.stdin != "" {
			f, err := os.Open(j.stdin)
			if err != nil {
				return total, err
			}
			defer f.Close()
			c.Stdin = f
		}
		m, err := timeCmd(c)
		if err != nil {
			return total, err
		}
		if j.memory {
			data, err := os.ReadFile(rssFile)
			if err != nil {
				return total, err
			}
			fields := strings.Fields(string(data))
			if len(fields) == 0 {
				return total, fmt.Errorf("GNU time wrote no peak RSS")
			}
			if m.rss, err = strconv.ParseInt(fields[len(fields)-1], 10, 64); err != nil {
				return total, fmt.Errorf("GNU time's peak RSS: %w", err)
			}
		}
		total.wall += m.wall
		total.cpu += m.cpu
		total.rss = max(total.rss, m.rss)
	}
	return total, nil
}

// timeCmd runs c and returns its wall and CPU time. Output goes to a file,
// not a pipe: a pipe adds a goroutine copying it to every run.
func timeCmd(c *exec.Cmd) (measured, error) {
	f, err := os.CreateTemp("", "bench-out-")
	if err != nil {
		return measured{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	c.Stdout, c.Stderr = f, f
	start := time.Now()
	err = c.Run()
	wall := time.Since(start)
	if err != nil {
		out, _ := os.ReadFile(f.Name())
		return measured{}, fmt.Errorf("%s: %v: %s", strings.Join(c.Args, " "), err, strings.TrimSpace(string(out)))
	}
	m := measured{wall: wall}
	if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
		m.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return m, nil
}

// linkCost returns the median time to create a symbolic link in each of
// dirs, the slowest of them, over n new links per folder that are left in
// place (deleting them would slow the next allocations on the file systems
// this is meant to watch).
func linkCost(dirs []string, n int) (time.Duration, error) {
	var worst time.Duration
	for _, dir := range dirs {
		var d []time.Duration
		for range n {
			probes++
			p := filepath.Join(dir, ".gpuctk-bench-probe-"+strconv.Itoa(probes))
			t := time.Now()
			if err := os.Symlink("target", p); err != nil {
				return 0, err
			}
			d = append(d, time.Since(t))
		}
		worst = max(worst, median(d))
	}
	return worst, nil
}

var probes int
