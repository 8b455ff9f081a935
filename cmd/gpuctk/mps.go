package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/urfave/cli/v2"

	"github.com/gpuctk/gpuctk/config"
	"github.com/gpuctk/gpuctk/driver"
	"github.com/gpuctk/gpuctk/mps"
	"github.com/gpuctk/gpuctk/offer"
)

func mpsFlags() []cli.Flag {
	return []cli.Flag{
		configFlag(),
		&cli.StringFlag{Name: "driver-root", EnvVars: envVar("driver-root"), Usage: "where the driver's files are (default: [cdi] driver-root, /)"},
		libraryPathFlag(),
		&cli.StringFlag{Name: "simulate", EnvVars: envVar("simulate"), Usage: "read the GPUs from the simulated host `NAME` (or a profile file) instead of NVML; leaves compute modes alone"},
		&cli.StringFlag{Name: "state-root", EnvVars: envVar("state-root"), Usage: "folder of the daemons' pipe, log and shm folders (default: [mps] state-root, /run/gpuctk/mps; set it there, as the spec's mounts use it too)"},
		&cli.BoolFlag{Name: "no-compute-mode", EnvVars: envVar("no-compute-mode"), Usage: "leave the GPUs' compute modes alone"},
	}
}

func mpsCommand() *cli.Command {
	return &cli.Command{
		Name:  "mps",
		Usage: "run the MPS control daemons of the devices shared through MPS",
		Subcommands: []*cli.Command{
			{
				Name:   "start",
				Usage:  "validate the MPS-shared devices and start a daemon for each that has none, or whose daemon lost its control socket or does not answer (it is ended first)",
				Flags:  mpsFlags(),
				Action: mpsStart,
			},
			{
				Name: "run",
				Usage: "start the daemons as start does, stay in the foreground restarting one that loses its control socket, hangs or dies (within 10 s), and stop them on SIGTERM or SIGINT " +
					"(for a container, such as deployments/kubernetes' MPS DaemonSet, or a Type=simple unit)",
				Flags:  mpsFlags(),
				Action: mpsRun,
			},
			{
				Name:   "stop",
				Usage:  "stop every daemon gpuctk started, unmount their /dev/shm and restore compute modes",
				Flags:  mpsFlags(),
				Action: mpsStop,
			},
			{
				Name:   "status",
				Usage:  "show the daemon of each MPS-shared device; exit status 3 when one the configuration asks for is not running",
				Flags:  append(mpsFlags(), &cli.BoolFlag{Name: "json", EnvVars: envVar("json"), Usage: "print JSON"}),
				Action: mpsStatus,
			},
		},
	}
}

// mpsSetup reads the configuration and builds the Manager. Stopping works
// without NVML (the driver may be gone by then): compute modes are then
// left as they are, with a warning. A command that writes under the state
// root (start, run, stop) is refused for a simulated host under the real
// host's.
func mpsSetup(c *cli.Context, stopping, writes bool) (*config.Config, *mps.Manager, error) {
	if c.NArg() > 0 {
		return nil, nil, fmt.Errorf("unexpected argument %q", c.Args().First())
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, nil, err
	}
	if writes && simulatedOnHostState(c, cfg.MPS.StateRoot) {
		return nil, nil, fmt.Errorf("--simulate with the host's own MPS state root %s: a simulated host's daemons would pass for the real host's; give --state-root a folder of its own", cfg.MPS.StateRoot)
	}
	driverRoot := cfg.CDI.DriverRoot
	opts := []mps.Option{
		mps.WithDriverRoot(driverRoot),
		mps.WithLibrarySearchPaths(cfg.CDI.LibrarySearchPaths...),
		mps.WithStateRoot(cfg.MPS.StateRoot),
		mps.WithShmSize(cfg.MPS.ShmSize),
		mps.WithPipeSize(cfg.MPS.PipeSize),
		mps.WithTimeout(cfg.MPS.Timeout()),
	}
	// Compute modes are real hardware state: never touched for a
	// simulated host.
	if *cfg.MPS.SetComputeMode && !c.Bool("no-compute-mode") && c.String("simulate") == "" {
		lib, err := driver.FindLibrary(driverRoot, "libnvidia-ml.so.1", driver.WithLibrarySearchPaths(cfg.CDI.LibrarySearchPaths...))
		switch {
		case err == nil:
			opts = append(opts, mps.WithComputeModer(mps.NewNVMLComputeMode(nvml.New(nvml.WithLibraryPath(lib)))))
		case stopping:
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: warning: %v: compute modes are left as they are\n", err)
		default:
			return nil, nil, err
		}
	}
	return cfg, mps.New(opts...), nil
}

func configName(cfg *config.Config) string {
	if cfg.Path == "" {
		return "default configuration"
	}
	return "config " + cfg.Path
}

// mpsDevices reads the configuration, builds the Manager, reads the host from --simulate or NVML,
// and returns its MPS-shared devices: what start and status work on.
func mpsDevices(c *cli.Context, writes bool) (*config.Config, *mps.Manager, []*offer.Share, error) {
	cfg, m, err := mpsSetup(c, false, writes)
	if err != nil {
		return nil, nil, nil, err
	}
	set, _, err := resolve(c, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, m, set.MPS(), nil
}

func mpsStart(c *cli.Context) error {
	_, _, err := startDaemons(c.Context, c)
	return err
}

// startDaemons is mps start: it returns what it did to each device it
// started or found running, and the error of those it could not start.
// Ending ctx interrupts it: the device being started is cleaned up and the
// next ones are not started.
func startDaemons(ctx context.Context, c *cli.Context) (*mps.Manager, []mps.Result, error) {
	cfg, m, devs, err := mpsDevices(c, true)
	if err != nil {
		return nil, nil, err
	}
	res, err := m.Start(ctx, devs)
	printStarted(c, res)
	if err != nil {
		return m, res, err
	}
	if len(res) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "no device is shared through MPS in the %s\n", configName(cfg))
	}
	return m, res, nil
}

// printStarted prints one line per device started, restarted or found
// running.
func printStarted(c *cli.Context, res []mps.Result) {
	for _, r := range res {
		d := r.Device
		fmt.Fprintf(c.App.Writer, "%s: %s, pid %d (%d replicas, %d%% threads, %dM pinned memory each)\n",
			d, r.Action, r.PID, d.Replicas, d.ThreadPercentage, d.PinnedMemoryMiB)
	}
}

// mpsRun is start, a wait for SIGTERM or SIGINT, then stop: what a
// container's main process does, as it has no unit to run stop for it.
func mpsRun(c *cli.Context) error {
	// Taken before the daemons start: a signal during start interrupts it,
	// then stops what started.
	ctx, cancel := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	m, res, err := startDaemons(ctx, c)
	if ctx.Err() != nil {
		if err != nil {
			fmt.Fprintf(c.App.ErrWriter, "gpuctk: %v\n", err)
		}
		return mpsStop(c)
	}
	if err != nil && len(res) == 0 {
		return err
	}
	if err != nil {
		// The daemons that started stay up, as mps start leaves them:
		// were run to exit, a container's runtime would kill them with
		// it, and the pod's restarts would take every device down again.
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: %v\ngpuctk: the other MPS daemons keep running; restart to try the failed devices again\n", err)
	}
	fmt.Fprintln(c.App.ErrWriter, "gpuctk: MPS daemons running; SIGTERM or SIGINT stops them")
	if err := notifyReady(); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "gpuctk: warning: telling systemd the daemons run: %v\n", err)
	}
	// The daemons started are watched: one that lost its control socket
	// (a tenant as root removed it), hangs or died is restarted, and its
	// device's tenants are not locked out until an administrator steps in.
	var devs []*offer.Share
	for _, r := range res {
		devs = append(devs, r.Device)
	}
	tick := time.NewTicker(mps.HealInterval)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			healed, err := m.Heal(ctx, devs)
			printStarted(c, healed)
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(c.App.ErrWriter, "gpuctk: %v\n", err)
			}
		}
	}
	// Stopping gets its own time: the signal has ended ctx.
	return mpsStop(c)
}

// notifyReady tells systemd, when it runs gpuctk as a Type=notify unit
// (gpuctk-mps.service), that the daemons run: units ordered after it
// (the engines, the kubelet) start then.
func notifyReady() error {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte("READY=1"))
	return err
}

func mpsStop(c *cli.Context) error {
	_, m, err := mpsSetup(c, true, true)
	if err != nil {
		return err
	}
	// Every daemon gpuctk started has a record: stopping needs neither
	// the host's GPUs nor the configuration's sharing entries, which may
	// have changed since.
	res, err := m.Stop(c.Context, nil)
	for _, r := range res {
		if r.PID > 0 {
			fmt.Fprintf(c.App.Writer, "%s: %s, pid %d\n", r.Device, r.Action, r.PID)
		} else {
			fmt.Fprintf(c.App.Writer, "%s: %s\n", r.Device, r.Action)
		}
	}
	if err == nil && len(res) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "no MPS daemon started by gpuctk to stop")
	}
	return err
}

// statusJSON is one device in `gpuctk mps status --json`.
type statusJSON struct {
	Name                   string `json:"name"`
	UUID                   string `json:"uuid"`
	GPU                    int    `json:"gpu"`
	MIG                    *int   `json:"mig,omitempty"`
	State                  string `json:"state"`
	PID                    int    `json:"pid,omitempty"`
	PipeDir                string `json:"pipeDir"`
	Answering              bool   `json:"answering"`
	ShmMounted             bool   `json:"shmMounted"`
	Configured             bool   `json:"configured"`
	Outdated               bool   `json:"outdated,omitempty"`
	Replicas               int    `json:"replicas"`
	ActiveThreadPercentage int    `json:"activeThreadPercentage"`
	PinnedMemoryLimitMiB   uint64 `json:"pinnedMemoryLimitMiB"`
}

func state(s mps.Status) string {
	st := "not running"
	switch {
	case s.Answering:
		st = "running"
	case s.PID > 0:
		st = "not answering"
	}
	if !s.Configured {
		st += ", not configured"
	}
	if s.Outdated {
		st += ", started with other settings: stop and start it"
	}
	return st
}

func mpsStatus(c *cli.Context) error {
	_, m, devs, err := mpsDevices(c, false)
	if err != nil {
		return err
	}
	// A record that cannot be read comes with the other devices'
	// statuses: they are printed, then the error.
	sts, err := m.Status(c.Context, devs)
	if err != nil && sts == nil {
		return err
	}
	if perr := printStatus(c, sts); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	return downError(sts)
}

// downError is status's exit status 3 (as an init script's status: not
// running) when a daemon the configuration asks for does not answer, with
// what to do; nil when every one answers.
func downError(sts []mps.Status) error {
	down, hung, configured := 0, 0, 0
	for _, s := range sts {
		if s.Configured {
			configured++
			if !s.Answering {
				down++
				if s.PID > 0 {
					hung++ // start ends it and starts another
				}
			}
		}
	}
	one := down == 1
	switch {
	case down == 0:
		return nil
	case hung == 0:
		return &exitError{code: 3, err: fmt.Errorf("%d of the %d MPS daemons the configuration asks for %s not running: start %s with `gpuctk mps start`",
			down, configured, map[bool]string{true: "is", false: "are"}[one], map[bool]string{true: "it", false: "them"}[one])}
	case hung == down:
		return &exitError{code: 3, err: fmt.Errorf("%d of the %d MPS daemons the configuration asks for %s: restart %s with `gpuctk mps start`",
			down, configured, map[bool]string{true: "does not answer", false: "do not answer"}[one], map[bool]string{true: "it", false: "them"}[one])}
	}
	return &exitError{code: 3, err: fmt.Errorf("%d of the %d MPS daemons the configuration asks for are not running or do not answer: start them with `gpuctk mps start`",
		down, configured)}
}

// printStatus prints the statuses as a table, or as JSON with --json.
func printStatus(c *cli.Context, sts []mps.Status) error {
	if c.Bool("json") {
		out := []statusJSON{}
		for _, s := range sts {
			d := s.Device
			j := statusJSON{
				Name: d.Name(), UUID: d.UUID(), GPU: d.GPU.Index, State: state(s), PID: s.PID, PipeDir: s.PipeDir,
				Answering: s.Answering, ShmMounted: s.ShmMounted, Configured: s.Configured, Outdated: s.Outdated,
				Replicas: d.Replicas, ActiveThreadPercentage: d.ThreadPercentage, PinnedMemoryLimitMiB: d.PinnedMemoryMiB,
			}
			if d.MIG != nil {
				j.MIG = &d.MIG.Index
			}
			out = append(out, j)
		}
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tUUID\tSTATE\tPID\tREPLICAS\tTHREADS\tMEMORY\tPIPE DIR")
	for _, s := range sts {
		d := s.Device
		name := d.Name()
		if d.MIG != nil {
			name = fmt.Sprintf("%s (%s)", d.Name(), d.GPUMIGName())
		}
		pid := "-"
		if s.PID > 0 {
			pid = fmt.Sprint(s.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d%%\t%dM\t%s\n", name, d.UUID(), state(s), pid,
			d.Replicas, d.ThreadPercentage, d.PinnedMemoryMiB, s.PipeDir)
	}
	return tw.Flush()
}
