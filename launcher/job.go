package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/comm/join"
	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/settings"
)

// Defaults of Job's durations.
const (
	DefaultBootstrapTimeout = 60 * time.Second
	DefaultKillGrace        = 2 * time.Second
	// DefaultLivenessTimeout is how long the bootstrap server and a rank
	// may stay silent before the other declares it lost
	// (FLEXLINK_LIVENESS_TIMEOUT): long enough that flexrun paused (a
	// debugger, SIGSTOP, a loaded login node) or a starved host does not
	// end a healthy job. A closed connection or a dead process is noticed
	// at once whatever it is.
	DefaultLivenessTimeout = 30 * time.Second
)

// Job is one flexrun invocation. Its settings come in groups (embedded,
// so job.NP, job.Stdout ... read as before): where the ranks run
// (Layout), what environment they get (RankEnv), where their output goes
// (Output) and how long things may take (Deadlines).
type Job struct {
	Program string   // run on every rank; looked up on PATH unless it has a slash
	Args    []string // passed to Program untouched

	Layout
	RankEnv
	Output
	Deadlines
	DryRun bool // print the placement to Stdout and return 0

	// Signals delivers the signals flexrun received (signal.Notify):
	// SIGINT and SIGTERM tear the job down, SIGUSR1 and SIGUSR2 are
	// forwarded. nil: none.
	Signals <-chan os.Signal

	// Remote says how hosts other than this one are reached (ssh, or srun
	// inside a Slurm allocation).
	Remote Remote

	Machine      *Machine     // nil: LocalMachine(Environ)
	NewBootstrap NewBootstrap // serves the job's bootstrap store; required unless DryRun
	Logger       hclog.Logger // nil: discard
}

// Layout is where a job's ranks run and on which CPUs (mpirun's -np,
// -H, --map-by, -N, --bind-to).
type Layout struct {
	Hosts         []Host // from -H or --hostfile; empty: this host, Machine.DefaultSlots slots
	NP            int    // ranks; 0: the total of the hosts' slots
	MapBy         MapBy  // "" is MapBySlot
	Oversubscribe bool   // allow more ranks than slots
	PerNode       int    // ranks per host (-N, --map-by ppr:N:node); 0: by slots
	// PerUnit is what PerNode counts the ranks of (--map-by ppr:N:UNIT):
	// "" or PerHost a host, PerNUMA each NUMA node, PerSocket each socket.
	PerUnit Domain

	BindTo         BindTo // CPU binding of each rank; "" is BindNone
	ReportBindings bool   // write each rank's binding to Stderr before it starts
}

// RankEnv is what the ranks' environment is made of.
type RankEnv struct {
	Exports []string // -x VAR or VAR=value
	Environ []string // flexrun's environment, inherited by the ranks; nil: os.Environ()
}

// Output is where the ranks' input comes from and their output goes.
type Output struct {
	TagOutput       bool   // prefix forwarded lines with "[1,rank]<stdout>:" ("<stderr>" on stderr), as mpirun
	TimestampOutput bool   // prefix forwarded lines with the time they arrived
	OutputDir       string // also write DIR/rank.N/stdout and stderr

	Stdin  io.Reader // rank 0's stdin; nil: /dev/null (other ranks always get /dev/null)
	Stdout io.Writer // ranks' stdout lines; nil: discarded
	Stderr io.Writer // ranks' stderr lines and flexrun's messages; nil: discarded
}

// Deadlines are how long a job and its steps may take.
type Deadlines struct {
	Timeout          time.Duration // whole job; 0: none. Exceeded: exit 124
	BootstrapTimeout time.Duration // passed as FLEXLINK_BOOTSTRAP_TIMEOUT; 0: 60 s
	KillGrace        time.Duration // SIGTERM to SIGKILL; 0: 2 s
	// LivenessTimeout is how long the bootstrap server and a rank may
	// stay silent before the other declares it lost; passed as
	// FLEXLINK_LIVENESS_TIMEOUT. 0: DefaultLivenessTimeout.
	LivenessTimeout time.Duration
	// CauseGrace is how long the first failure waits for the other ranks'
	// ends before flexrun names the cause (sooner when every rank has
	// ended); 0: DefaultCauseGrace.
	CauseGrace time.Duration
	// KeepGoing: a rank that fails does not end the job. The others run
	// on (the bootstrap serves the survivors, so NCCL programs can shrink
	// their communicators, and each communicator of the lost rank fails on
	// its own); flexrun names the first failure when every rank has ended
	// and exits with its status. Timeouts and signals still end the job.
	KeepGoing bool
}

// Bootstrap is the job's rendezvous server as the launcher uses it
// (bootstrap.Server satisfies it through a small adapter in cmd/flexrun).
type Bootstrap interface {
	Addr() string    // host:port the ranks dial
	Abort(err error) // deliver err to every rank's pending and later calls
	Close() error    // stop serving
}

// BootstrapConfig is what the launcher asks of its bootstrap server.
type BootstrapConfig struct {
	// Listen is the address to listen on: "127.0.0.1:0" when every rank
	// is local, "0.0.0.0:0" when some run on other hosts.
	Listen string
	Size   int
	Secret []byte
	JobID  string
	Logger hclog.Logger
	// Report, where the server can tell, is told what it sees of the
	// job (see BootstrapReport): joins, goodbyes, losses, refusals and the
	// communicators' ends the ranks publish. It never blocks; nil: the
	// server reports nothing.
	Report func(BootstrapReport)
	// KeepOnLoss: a lost rank fails only what needs it; the server goes on
	// serving the others (Deadlines.KeepGoing).
	KeepOnLoss bool
	// PeerTimeout is how long a rank may stay silent before the server
	// declares it lost (Deadlines.LivenessTimeout).
	PeerTimeout time.Duration
	// Ports is FLEXLINK_PORT_RANGE (flexrun --port-range): the server
	// listens on its first free port (the zero Range: an ephemeral one).
	Ports ports.Range
	// Transient picks, by the host name a rank joins with, the members
	// that join only to report (join.IsReporterHost: flexlink's libnccl
	// publishing why its communicators ended): each may join again to
	// report again, and one that dies or sends garbage mid-report loses
	// only its own report, never the job's store and the others' reports
	// (bootstrap.ServerConfig.Transient).
	Transient func(host string) bool
}

// NewBootstrap starts a bootstrap server listening on cfg.Listen.
type NewBootstrap func(BootstrapConfig) (Bootstrap, error)

// Run plans the job, starts every rank and supervises them until all have
// exited. It returns the exit code flexrun should end with: 0 when every
// rank exited 0, else the first failing rank's code (128+signal when it was
// killed by one), 124 when Timeout passed, 128+signal when flexrun was told
// to stop by SIGINT or SIGTERM, 127 when Program is not found, 1 for other
// errors. err is a *JobError when the job ran and failed (its one-line
// message has already been written to Stderr), another error when it could
// not be started (not yet written anywhere).
func Run(ctx context.Context, job Job) (int, error) {
	job = job.withDefaults()
	plan, env, hosts, err := job.prepare()
	if err != nil {
		return 1, err
	}
	if job.DryRun {
		return 0, printPlan(job.Stdout, job, plan)
	}
	var remote []Host
	path := job.Program
	for _, h := range hosts {
		if h.Local {
			if path, err = exec.LookPath(job.Program); err != nil {
				code := 126
				if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
					code = 127
				}
				return code, fmt.Errorf("program %s: %w", job.Program, err)
			}
		} else if used(plan, h.Name) {
			remote = append(remote, h)
		}
	}
	if job.NewBootstrap == nil {
		return 1, fmt.Errorf("launcher: Job.NewBootstrap is nil")
	}
	// Room for every exit: a plan per NUMA node or socket may grow once
	// the agents report their hosts' counts (replanDomains).
	exits := make(chan rankExit, 8*len(plan)+64)
	var rj *remoteJob
	if len(remote) > 0 {
		// Every host says hello before anything else starts, so that
		// unreachable hosts are reported before any rank runs.
		if rj, err = launchAgents(ctx, job.Remote, remote, job.srunMode(), exits, job.Logger); err != nil {
			return 1, err
		}
		defer rj.shutdown(job.KillGrace + 2*time.Second)
		if plan, hosts, err = job.replanDomains(plan, hosts, rj); err != nil {
			return 1, err
		}
		if len(plan) > cap(exits) {
			return 1, fmt.Errorf("plan: %d ranks once the agents reported their hosts, more than flexrun planned for (%d)", len(plan), cap(exits))
		}
	}
	je, err := job.secrets(len(plan))
	if err != nil {
		return 1, err
	}
	listen := "127.0.0.1:0"
	if len(remote) > 0 {
		listen = "0.0.0.0:0"
	}
	pr, err := envLookup(env).Ports() // flexrun's own listeners take FLEXLINK_PORT_RANGE's ports too
	if err != nil {
		return 1, err
	}
	reports := newReportLedger()
	srv, err := job.NewBootstrap(BootstrapConfig{Listen: listen, Size: len(plan), Secret: je.secret, JobID: je.JobID, Logger: job.Logger, Report: reports.add, KeepOnLoss: job.KeepGoing, PeerTimeout: job.LivenessTimeout, Ports: pr, Transient: join.IsReporterHost})
	if err != nil {
		return 1, fmt.Errorf("start bootstrap server: %w", err)
	}
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Addr())
	je.Bootstrap = net.JoinHostPort("127.0.0.1", port)
	if je.MasterPort, err = freePort(je.Bootstrap, pr); err != nil {
		return 1, err
	}
	if !isLocalHost(hosts, plan[0].Host) {
		je.MasterAddr = plan[0].Host // rank 0's host, as the user named it
	}
	sup := &supervisor{job: job, launchSpec: launchSpec{path: path, plan: plan, env: env, je: je.jobEnv}, srv: srv, exits: exits, causeWindow: causeWindow{reports: reports}}
	if sup.binds, err = job.localBindings(plan, hosts, env); err != nil {
		return 1, err
	}
	if rj != nil {
		specs, err := job.agentSpecs(rj, plan, je.jobEnv)
		if err != nil {
			return 1, err
		}
		if err := rj.prepare(ctx, specs); err != nil {
			return 1, err
		}
		sup.remote = rj
	}
	return sup.run(ctx)
}

func (job Job) withDefaults() Job {
	if job.Environ == nil {
		job.Environ = os.Environ()
	}
	if job.BootstrapTimeout <= 0 {
		job.BootstrapTimeout = DefaultBootstrapTimeout
	}
	if job.KillGrace <= 0 {
		job.KillGrace = DefaultKillGrace
	}
	if job.LivenessTimeout <= 0 {
		job.LivenessTimeout = DefaultLivenessTimeout
	}
	if job.CauseGrace <= 0 {
		job.CauseGrace = DefaultCauseGrace
	}
	if job.Stdout == nil {
		job.Stdout = io.Discard
	}
	if job.Stderr == nil {
		job.Stderr = io.Discard
	}
	job.Stdout, job.Stderr = Locked(job.Stdout), Locked(job.Stderr)
	if job.Remote.AgentTimeout <= 0 {
		// One liveness limit: a host silent as long as a rank may be.
		job.Remote.AgentTimeout = job.LivenessTimeout
	}
	job.Remote = job.Remote.withDefaults()
	if job.Logger == nil {
		job.Logger = hclog.NewNullLogger()
	}
	if job.Machine == nil {
		m := LocalMachine(job.Environ)
		job.Machine = &m
	}
	return job
}

// prepare checks the hosts, plans the ranks and applies -x: everything that
// can fail before a process starts.
func (job Job) prepare() ([]Placement, []string, []Host, error) {
	if job.Program == "" {
		return nil, nil, nil, fmt.Errorf("no program given")
	}
	hosts, err := job.hosts()
	if err != nil {
		return nil, nil, nil, err
	}
	env, warnings, err := applyExports(job.Environ, job.Exports)
	if err != nil {
		return nil, nil, nil, err
	}
	hosts = job.domainCounts(hosts, env)
	plan, err := job.plan(hosts)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, w := range warnings {
		job.Logger.Warn(w)
	}
	// The ranks' FLEXLINK_* settings (flexrun's own and -x's) are checked
	// here, so that a bad one stops the job before any rank starts.
	if err := settings.Validate(envLookup(env)); err != nil {
		if lines := strings.Split(err.Error(), "\n"); len(lines) > 1 {
			return nil, nil, nil, fmt.Errorf("%d bad settings:\n  %s", len(lines), strings.Join(lines, "\n  "))
		}
		return nil, nil, nil, fmt.Errorf("bad setting: %w", err)
	}
	for _, w := range settings.Warnings(env) {
		job.Logger.Warn(w)
	}
	return plan, env, hosts, nil
}

// envLookup reads a NAME=value list (the last NAME wins, as in exec).
func envLookup(env []string) settings.Env {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return settings.Map(m)
}

type jobSecrets struct {
	jobEnv
	secret []byte
}

// secrets draws the job id and the 32-byte job secret from crypto/rand.
func (job Job) secrets(size int) (jobSecrets, error) {
	b := make([]byte, 40)
	if _, err := rand.Read(b); err != nil {
		return jobSecrets{}, fmt.Errorf("job secret: %w", err)
	}
	return jobSecrets{
		jobEnv: jobEnv{
			Size:             size,
			JobID:            hex.EncodeToString(b[32:]),
			Secret:           hex.EncodeToString(b[:32]),
			BootstrapTimeout: job.BootstrapTimeout,
			LivenessTimeout:  job.LivenessTimeout,
			MasterAddr:       "127.0.0.1",
		},
		secret: b[:32],
	}, nil
}

// freePort finds a free TCP port on the loopback interface for PyTorch's
// MASTER_PORT, other than the bootstrap's: in r when it is a range
// (FLEXLINK_PORT_RANGE), taken from its top down, since the port is
// released for PyTorch to bind and the job's other listeners take the
// range from the bottom up; otherwise below the kernel's ephemeral range
// (ports.ListenBelowEphemeral), where no other process's bind(0) or
// connect can take it before torch binds it.
func freePort(bootstrap string, r ports.Range) (int, error) {
	_, bport, _ := net.SplitHostPort(bootstrap)
	var held []net.Listener // the bootstrap's port, found free on loopback: held so the next try skips it
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 3 {
		l, err := listenMaster(r)
		if err != nil {
			return 0, fmt.Errorf("find a free port for MASTER_PORT: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if fmt.Sprint(port) != bport {
			l.Close()
			return port, nil
		}
		held = append(held, l)
	}
	return 0, fmt.Errorf("find a free port for MASTER_PORT: kept getting the bootstrap's port %s", bport)
}

// listenMaster listens on a candidate for MASTER_PORT (see freePort).
func listenMaster(r ports.Range) (net.Listener, error) {
	if r.IsZero() {
		return ports.ListenBelowEphemeral(context.Background(), "tcp", "127.0.0.1")
	}
	return r.ListenFromTop(context.Background(), "tcp", "127.0.0.1")
}

// printPlan writes the --dry-run table.
func printPlan(w io.Writer, job Job, plan []Placement) error {
	var b strings.Builder
	fmt.Fprintf(&b, "flexrun: dry run: %d ranks: %s\n", len(plan), strings.Join(append([]string{job.Program}, job.Args...), " "))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	in := len(plan) > 0 && plan[0].In.Unit != ""
	head := "RANK\tHOST\tNODE\tLOCAL_RANK\tLOCAL_SIZE\tGPU"
	if in {
		head += "\tIN" // the NUMA node or socket of --map-by ppr:N:numa|socket
	}
	fmt.Fprintln(tw, head)
	for _, p := range plan {
		gpu := "-"
		if p.GPU >= 0 {
			gpu = fmt.Sprint(p.GPU)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s", p.Rank, p.Host, p.NodeRank, p.LocalRank, p.LocalSize, gpu)
		if in {
			fmt.Fprintf(tw, "\t%s #%d", p.In.Unit.name(), p.In.Index)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}
