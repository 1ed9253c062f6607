// Command flexrun starts a flexlink job: N copies of a program, each told
// its rank and how to reach the job's bootstrap store, supervised so that
// the job ends as a whole.
//
//	flexrun [flags] PROGRAM [ARGS...]
//	flexrun agent [--node N] [--check]     (hidden: started by flexrun over ssh or srun)
//
// Flags end at PROGRAM: everything after it is passed to the program
// untouched (flexrun -np 4 ./train --lr 0.1). The behaviour (placement,
// environment, output, signals, exit codes) is documented in package
// launcher.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/launcher"
)

func main() {
	os.Exit(run(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// run is flexrun with its process state passed in; it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	if len(args) > 1 && args[1] == "agent" {
		return runAgent(ctx, args[2:], stdin, stdout, stderr)
	}
	lout, lerr := launcher.Locked(stdout), launcher.Locked(stderr)
	stdout, stderr = lout, lerr
	defer func() {
		// Output that could not be written (a full disk, a closed pipe) is
		// lost: say so where possible and fail, as coreutils do.
		if err := lout.Err(); err != nil {
			fmt.Fprintf(stderr, "flexrun: write error on stdout: %v (output was lost)\n", err)
		}
		if (lout.Err() != nil || lerr.Err() != nil) && code == 0 {
			code = 1
		}
	}()
	app := newApp(stdin, stdout, stderr, &code)
	if err := app.RunContext(ctx, args); err != nil {
		err = unknownFlag(err, args[1:], app.Flags)
		var je *launcher.JobError
		if !errors.As(err, &je) { // a JobError has been reported already
			fmt.Fprintf(stderr, "flexrun: %v\n", err)
		}
		if code == 0 {
			code = 2 // the command line could not be parsed
		}
	}
	return code
}

func newApp(stdin io.Reader, stdout, stderr io.Writer, code *int) *cli.App {
	return &cli.App{
		Name:      "flexrun",
		Usage:     "launch a flexlink job",
		UsageText: "flexrun [flags] PROGRAM [ARGS...]   (flags end at PROGRAM)",
		Version:   version(),
		Writer:    stdout,
		ErrWriter: stderr,
		// Values of -x and -H keep their commas; -H splits its own.
		DisableSliceFlagSeparator: true,
		// No subcommands: a program named "help" is run, not explained.
		HideHelpCommand: true,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%w (see flexrun --help)", err)
		},
		Flags:  flags(),
		Action: func(c *cli.Context) error { return action(c, stdin, stdout, stderr, code) },
	}
}

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "np", Aliases: []string{"n"}, Usage: "start `N` ranks", DefaultText: "the total of the slots"},
		&cli.StringSliceFlag{Name: "host", Aliases: []string{"H"}, Usage: "`HOSTS` as host[:slots],... (repeatable; a host named twice adds slots)"},
		&cli.StringFlag{Name: "hostfile", Aliases: []string{"machinefile"}, Usage: "OpenMPI hostfile `FILE`: lines of host [slots=N] [max_slots=M]"},
		&cli.BoolFlag{Name: "oversubscribe", Usage: "allow more ranks than slots"},
		&cli.StringFlag{Name: "map-by", Value: "slot", Usage: "rank layout `HOW`: slot (fill each host), node (round-robin), ppr:N:node (N ranks on each host), ppr:N:numa or ppr:N:socket (N ranks on each NUMA node or socket of each host, bound there)"},
		&cli.IntFlag{Name: "nnodes", Usage: "use `N` hosts (torchrun --nnodes): the first N of -H/--hostfile, or check a Slurm allocation's node count", DefaultText: "all given"},
		&cli.IntFlag{Name: "npernode", Aliases: []string{"N", "nproc-per-node", "nproc_per_node"}, Usage: "start `N` ranks on each host (mpirun -N, torchrun --nproc-per-node; --map-by ppr:N:node)", DefaultText: "by slots"},
		&cli.StringFlag{Name: "bind-to", Value: "auto", Usage: "bind each rank to `WHAT`: auto (gpu when ranks have GPUs, else none), none, core (a distinct share of the host's CPUs), numa (its GPU's NUMA node, else round-robin over the nodes) or gpu (its GPU's NUMA node; unbound without one)"},
		&cli.BoolFlag{Name: "report-bindings", Usage: "print each rank's CPUs to stderr before it starts"},
		&cli.StringSliceFlag{Name: "x", Usage: "export `VAR` or VAR=value to the ranks (repeatable; commas are kept)"},
		&cli.BoolFlag{Name: "tag-output", Usage: `prefix each output line with "[1,rank]<stdout>:" or "[1,rank]<stderr>:" (mpirun's tags)`},
		&cli.BoolFlag{Name: "timestamp-output", Usage: `prefix each output line with the time flexrun received it, as mpirun does ("Tue Nov 24 14:20:40 2026<stdout>:")`},
		&cli.BoolFlag{Name: "nccl", Usage: "serve the ranks' NCCL calls (PyTorch, nccl-tests, any NCCL program) with flexlink's libnccl.so.2, preloaded (LD_PRELOAD)"},
		&cli.StringFlag{Name: "nccl-lib", Usage: "`DIR` holding flexlink's libnccl.so.2 for --nccl", DefaultText: "build/nccl/lib or lib next to flexrun's bin/"},
		&cli.StringFlag{Name: "output-dir", Usage: "also write each rank's output to `DIR`/rank.N/stdout and stderr"},
		&cli.StringFlag{Name: "output-filename", Usage: "mpirun's layout: also write each rank's output to `DIR`/1/rank.N/stdout and stderr"},
		&cli.BoolFlag{Name: "dry-run", Usage: "print the placement and exit"},
		durationFlag("timeout", 0, "time limit of the whole job, in seconds or as 1m30s; exceeded: exit 124", "none"),
		durationFlag("bootstrap-timeout", launcher.DefaultBootstrapTimeout, "how long ranks wait for each other to join (FLEXLINK_BOOTSTRAP_TIMEOUT)", ""),
		durationFlag("liveness-timeout", launcher.DefaultLivenessTimeout, "how long a rank and the bootstrap may stay silent (paused, starved, cut off) before the other declares it lost; a closed connection or a dead rank is noticed at once (FLEXLINK_LIVENESS_TIMEOUT)", ""),
		durationFlag("kill-grace", launcher.DefaultKillGrace, "time between SIGTERM and SIGKILL when the job is torn down", ""),
		durationFlag("cause-grace", launcher.DefaultCauseGrace, "after a rank fails, how long the other ranks' ends are awaited before flexrun names the cause", ""),
		&cli.BoolFlag{Name: "keep-going", Usage: "a rank that fails does not end the job: the others run on (NCCL programs can shrink their communicators); flexrun names the first failure once every rank has ended and exits with its status"},
		&cli.StringFlag{Name: "launcher", Usage: "how other hosts are reached: `ssh` or srun", DefaultText: "srun inside a Slurm allocation, else ssh"},
		&cli.StringFlag{Name: "ssh", Value: "ssh", Usage: "ssh `PROGRAM` that starts the agents (called like ssh: [options] -- HOST COMMAND)"},
		&cli.StringFlag{Name: "ssh-args", Usage: "extra `ARGS` for ssh, split like a shell would (e.g. \"-F cfg -p 2222\")"},
		&cli.StringFlag{Name: "srun-args", Usage: "extra `ARGS` for the srun that starts the agents"},
		&cli.StringFlag{Name: "prefix", Usage: "flexrun is `DIR`/bin/flexrun or DIR/flexrun on the other hosts (that directory is also put first on the ranks' PATH there)"},
		durationFlag("connect-timeout", launcher.DefaultConnectTimeout, "ssh -o ConnectTimeout", ""),
		durationFlag("launch-timeout", launcher.DefaultLaunchTimeout, "how long an agent may take to start and accept the job", ""),
		durationFlag("agent-timeout", 0, "a host silent this long is lost (and its agent kills its ranks)", "--liveness-timeout"),
		&cli.IntFlag{Name: "launch-parallel", Value: launcher.DefaultMaxParallel, Usage: "at most `N` ssh connections opened at once"},
		&cli.StringFlag{Name: "port-range", Usage: "TCP ports every listener of the job takes, `FIRST-LAST` (50000-50100): flexrun's bootstrap server and MASTER_PORT, and the ranks' network listeners, each the first free port in order (sets FLEXLINK_PORT_RANGE for flexrun and the ranks)", DefaultText: "FLEXLINK_PORT_RANGE, else ephemeral ports"},
		&cli.StringFlag{Name: "bootstrap-addr", Usage: "`ADDR` of this machine that ranks on other hosts dial", DefaultText: "the interface that routes to each host"},
	}
}

func action(c *cli.Context, stdin io.Reader, stdout, stderr io.Writer, code *int) error {
	*code = 1
	if c.NArg() == 0 {
		*code = 2
		return errors.New("no program given: flexrun [flags] PROGRAM [ARGS...] (see flexrun --help)")
	}
	job, err := jobFromFlags(c)
	if err != nil {
		return err
	}
	job.Stdin, job.Stdout, job.Stderr = stdin, stdout, stderr
	job.Logger = newLogger(stderr)
	job.NewBootstrap = newBootstrap

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	job.Signals = sigs

	*code, err = launcher.Run(c.Context, job)
	return err
}

// jobFromFlags turns the command line into a launcher.Job.
func jobFromFlags(c *cli.Context) (launcher.Job, error) {
	job := launcher.Job{
		Program: c.Args().First(),
		Args:    c.Args().Tail(),
		Layout: launcher.Layout{
			NP:             c.Int("np"),
			Oversubscribe:  c.Bool("oversubscribe"),
			PerNode:        c.Int("npernode"),
			ReportBindings: c.Bool("report-bindings"),
		},
		RankEnv: launcher.RankEnv{Exports: c.StringSlice("x")},
		Output: launcher.Output{
			TagOutput:       c.Bool("tag-output"),
			TimestampOutput: c.Bool("timestamp-output"),
			OutputDir:       c.String("output-dir"),
		},
		DryRun: c.Bool("dry-run"),
		Deadlines: launcher.Deadlines{
			Timeout:          duration(c, "timeout"),
			BootstrapTimeout: duration(c, "bootstrap-timeout"),
			KillGrace:        duration(c, "kill-grace"),
			LivenessTimeout:  duration(c, "liveness-timeout"),
			CauseGrace:       duration(c, "cause-grace"),
			KeepGoing:        c.Bool("keep-going"),
		},
	}
	if job.NP < 0 {
		return job, fmt.Errorf("-np %d: want 1 or more (or 0: the total of the slots)", job.NP)
	}
	// Zero would mean nothing sensible for these (--timeout 0 is "none").
	for _, name := range []string{"bootstrap-timeout", "liveness-timeout", "kill-grace", "cause-grace", "connect-timeout", "launch-timeout", "agent-timeout"} {
		if c.IsSet(name) && duration(c, name) <= 0 {
			return job, fmt.Errorf("--%s %s: want more than 0", name, c.Generic(name))
		}
	}
	if c.IsSet("port-range") {
		if _, err := ports.Parse(c.String("port-range")); err != nil {
			return job, fmt.Errorf("--port-range %w", err)
		}
		job.Exports = append(job.Exports, ports.Setting+"="+c.String("port-range")) // flexrun's listeners read it there too
	}
	if c.Bool("nccl") || c.IsSet("nccl-lib") {
		pre, err := ncclPreload(c.String("nccl-lib"), os.Getenv("LD_PRELOAD"))
		if err != nil {
			return job, err
		}
		job.Exports = append(job.Exports, pre)
	}
	var err error
	if job.Remote, err = remoteFromFlags(c); err != nil {
		return job, err
	}
	if err = mappingFromFlags(c, &job); err != nil {
		return job, err
	}
	hostList, hostfile := c.StringSlice("host"), c.String("hostfile")
	switch {
	case len(hostList) > 0 && hostfile != "":
		return job, errors.New("give either -H or --hostfile, not both")
	case len(hostList) > 0:
		job.Hosts, err = launcher.ParseHostList(hostList)
	case hostfile != "":
		job.Hosts, err = launcher.ReadHostfile(hostfile)
	}
	if err != nil || !c.IsSet("nnodes") {
		return job, err
	}
	job.Hosts, err = firstNodes(job.Hosts, c.Int("nnodes"), os.Getenv("SLURM_JOB_NUM_NODES"))
	return job, err
}

// firstNodes applies --nnodes n (torchrun's): the first n of the hosts
// given; without hosts, n must be 1 (this machine) or, inside a Slurm
// allocation, the allocation's node count (slurmNodes).
func firstNodes(hosts []launcher.Host, n int, slurmNodes string) ([]launcher.Host, error) {
	switch {
	case n < 1:
		return nil, fmt.Errorf("--nnodes %d: want 1 or more", n)
	case len(hosts) >= n:
		return hosts[:n], nil
	case len(hosts) > 0:
		return nil, fmt.Errorf("--nnodes %d: only %d host(s) given with -H/--hostfile", n, len(hosts))
	case slurmNodes != "":
		if slurmNodes != strconv.Itoa(n) {
			return nil, fmt.Errorf("--nnodes %d: the Slurm allocation has %s node(s) (salloc -N %d)", n, slurmNodes, n)
		}
		return nil, nil
	case n == 1:
		return nil, nil
	}
	return nil, fmt.Errorf("--nnodes %d: give the hosts with -H or --hostfile, or run inside a Slurm allocation of %d nodes", n, n)
}

// remoteFromFlags reads the flags about other hosts.
func remoteFromFlags(c *cli.Context) (launcher.Remote, error) {
	r := launcher.Remote{
		Launcher:       c.String("launcher"),
		SSH:            c.String("ssh"),
		Prefix:         c.String("prefix"),
		ConnectTimeout: duration(c, "connect-timeout"),
		LaunchTimeout:  duration(c, "launch-timeout"),
		AgentTimeout:   duration(c, "agent-timeout"),
		MaxParallel:    c.Int("launch-parallel"),
		BootstrapHost:  c.String("bootstrap-addr"),
	}
	if r.MaxParallel < 1 {
		return r, fmt.Errorf("--launch-parallel %d: want 1 or more", r.MaxParallel)
	}
	switch r.Launcher {
	case "", "ssh", "srun":
	default:
		return r, fmt.Errorf("--launcher %q: want ssh or srun", r.Launcher)
	}
	var err error
	if r.SSHArgs, err = launcher.SplitArgs(c.String("ssh-args")); err != nil {
		return r, fmt.Errorf("--ssh-args %w", err)
	}
	if r.SrunArgs, err = launcher.SplitArgs(c.String("srun-args")); err != nil {
		return r, fmt.Errorf("--srun-args %w", err)
	}
	return r, nil
}

// newBootstrap serves the job's bootstrap store on the address the
// launcher asks for (loopback, or every interface when ranks run on other
// hosts).
func newBootstrap(cfg launcher.BootstrapConfig) (launcher.Bootstrap, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	srv, err := bootstrap.NewServer(bootstrap.ServerConfig{
		Addr: cfg.Listen, Size: cfg.Size, Secret: cfg.Secret, JobID: cfg.JobID, Logger: newBootLog(log),
		KeepOnLoss: cfg.KeepOnLoss, OnEvent: bootReports(cfg.Report), PeerTimeout: cfg.PeerTimeout, Ports: cfg.Ports,
		Transient: cfg.Transient,
	})
	if err != nil {
		return nil, err
	}
	return srv, nil
}

// newLogger logs to stderr at the level FLEXLINK_DEBUG names (WARN when
// unset or unknown).
func newLogger(stderr io.Writer) hclog.Logger {
	level := hclog.LevelFromString(settings.OS().String("FLEXLINK_DEBUG"))
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	return hclog.New(&hclog.LoggerOptions{Name: "flexrun", Level: level, Output: stderr})
}

// version is the module version and VCS revision the binary was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-dirty"
			}
		}
	}
	if rev != "" {
		v += " (" + rev[:min(len(rev), 12)] + modified + ")"
	}
	return strings.TrimSpace(v) + ", " + bi.GoVersion
}
