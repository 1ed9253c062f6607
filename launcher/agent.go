package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// AgentConfig configures RunAgent, the far end of an ssh or srun launch:
// `flexrun agent` runs it on every host but flexrun's own.
type AgentConfig struct {
	In     io.Reader // frames from flexrun (the agent's stdin)
	Out    io.Writer // frames to flexrun (the agent's stdout)
	Stderr io.Writer // the agent's own complaints; nil: discarded
	// Node is this agent's index in the job; negative: SLURM_PROCID (one
	// agent per node of an srun step).
	Node    int
	Environ []string // the agent's environment; nil: os.Environ()
	Check   bool     // say hello, then exit 0 (flexrun agent --check)
	// SpecTimeout bounds the wait for flexrun's spec after the hello
	// (default 60 s).
	SpecTimeout time.Duration
	// Signals delivers the signals the agent received: SIGINT, SIGTERM
	// and SIGHUP tear its ranks down. nil: none.
	Signals <-chan os.Signal
	Machine *Machine // nil: LocalMachine(Environ)
}

// agentHello is the agent's first frame: who and where it is.
type agentHello struct {
	Protocol  int    `json:"protocol"`
	Host      string `json:"host"`       // FLEXLINK_HOSTNAME, else the host name
	SlurmNode string `json:"slurm_node"` // SLURMD_NODENAME under srun
	Pid       int    `json:"pid"`
	GPUs      int    `json:"gpus"`
	CPUs      int    `json:"cpus"`
	// NUMANodes and Sockets: CountDomains, for --map-by ppr:N:numa|socket.
	NUMANodes int    `json:"numa_nodes,omitempty"`
	Sockets   int    `json:"sockets,omitempty"`
	Client    string `json:"client"` // flexrun's address as this host saw the ssh connection come in
	Exe       string `json:"exe"`
}

// agentSpec is what flexrun asks an agent to run.
type agentSpec struct {
	Node       int           `json:"node"`
	Program    string        `json:"program"`
	Args       []string      `json:"args"`
	Dir        string        `json:"dir"`         // flexrun's working directory, used when it exists here
	Env        []string      `json:"env"`         // set over the agent's environment
	PathPrefix string        `json:"path_prefix"` // prepended to PATH ("": none)
	Job        jobEnv        `json:"job"`         // Bootstrap and MasterAddr as this host must dial them
	Ranks      []Placement   `json:"ranks"`       // this host's ranks, GPU filled in
	KillGrace  time.Duration `json:"kill_grace"`
	// Timeout: flexrun silent this long (no frame) counts as lost, and
	// the ranks are killed. Pings go out every fifth of it.
	Timeout   time.Duration `json:"timeout"`
	StdinRank int           `json:"stdin_rank"` // rank fed by "in" frames; -1: none
	agentBinding
}

// agentBinding is the ranks' CPU binding, decided by the agent from its
// host's CPUs; ReportBindings: send each rank's binding as a "bind" frame.
// (Embedded: its fields sit at the top of agentSpec's JSON.)
type agentBinding struct {
	BindTo         BindTo `json:"bind_to,omitempty"`
	ReportBindings bool   `json:"report_bindings,omitempty"`
}

// agent is one running `flexrun agent`.
type agent struct {
	cfg  AgentConfig
	fw   *frameWriter
	node int
	agentProgram
	sp    *spawner
	ranks []*rankProc
	binds map[int]Binding // by rank (--bind-to); nil: none bound
	agentStdin
	agentInput
	agentRanks
	agentEnding
}

// agentProgram is what flexrun asked the agent to run, resolved here.
type agentProgram struct {
	spec *agentSpec
	path string // resolved program
	dir  string
}

// agentStdin feeds flexrun's stdin to the rank that reads it.
type agentStdin struct {
	stdin  chan []byte // rank's stdin chunks; nil: none
	stdinR *os.File    // read end of that rank's stdin, until it starts
}

// agentInput is the frames from flexrun and when it was last heard.
type agentInput struct {
	frames chan frame
	inErr  error // why frames closed
	heard  time.Time
}

// agentRanks counts the ranks still running and those whose output has
// not ended yet.
type agentRanks struct {
	exits     chan rankExit
	drained   chan int
	alive     int // started, not yet exited
	undrained int // started, output not yet ended
}

// agentEnding is the agent's teardown once it began.
type agentEnding struct {
	tearing bool
	killC   <-chan time.Time
}

// RunAgent speaks the agent protocol on cfg.In and cfg.Out until its
// ranks have ended, flexrun says bye, or flexrun is lost (input closed,
// or silent for the spec's Timeout), in which case the ranks get SIGTERM
// and, after the kill grace, SIGKILL. It returns the agent's exit code.
func RunAgent(ctx context.Context, cfg AgentConfig) int {
	if cfg.Environ == nil {
		cfg.Environ = os.Environ()
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.SpecTimeout <= 0 {
		cfg.SpecTimeout = 60 * time.Second
	}
	if cfg.Machine == nil {
		m := LocalMachine(cfg.Environ)
		cfg.Machine = &m
	}
	a := &agent{cfg: cfg, fw: newFrameWriter(cfg.Out), node: cfg.Node, agentInput: agentInput{frames: make(chan frame, 64)}, agentRanks: agentRanks{drained: make(chan int, 16)}}
	if a.node < 0 {
		v, _ := lookupEnv(cfg.Environ, "SLURM_PROCID")
		n, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintf(cfg.Stderr, "flexrun agent: no --node and no SLURM_PROCID (%q)\n", v)
			return 2
		}
		a.node = n
	}
	_ = a.fw.send(frame{Kind: kHello, Node: a.node, Rank: -1, Data: a.hello()})
	code := 0
	if !cfg.Check {
		go a.read()
		code = a.loop(ctx)
	}
	// The last frames (bye, a failure) must reach flexrun before the
	// process ends; a peer that takes them in no time is gone anyway.
	if !a.fw.flush(2 * time.Second) {
		fmt.Fprintln(cfg.Stderr, "flexrun agent: could not send the last frames to flexrun")
	}
	if a.sp != nil {
		a.sp.stop()
	}
	return code
}

func (a *agent) hello() []byte {
	h := agentHello{Protocol: agentProtocol, Pid: os.Getpid(), GPUs: a.cfg.Machine.GPUs, CPUs: a.cfg.Machine.CPUs}
	h.NUMANodes, h.Sockets = CountDomains(envLookup(a.cfg.Environ), "")
	h.Host, _ = lookupEnv(a.cfg.Environ, "FLEXLINK_HOSTNAME")
	if h.Host == "" {
		h.Host = a.cfg.Machine.Hostname
	}
	h.SlurmNode, _ = lookupEnv(a.cfg.Environ, "SLURMD_NODENAME")
	if c, ok := lookupEnv(a.cfg.Environ, "SSH_CONNECTION"); ok {
		h.Client, _, _ = strings.Cut(c, " ")
	}
	h.Exe, _ = os.Executable()
	b, _ := json.Marshal(h)
	return b
}

// read turns the input into frames for this agent until it ends.
func (a *agent) read() {
	fr := newFrameReader(a.cfg.In, false, nil)
	for {
		f, _, err := fr.next()
		if err != nil {
			a.inErr = err
			close(a.frames)
			return
		}
		if f.Node == -1 || f.Node == a.node {
			a.frames <- f
		}
	}
}

// loop is the agent's event loop.
func (a *agent) loop(ctx context.Context) int {
	specT := time.NewTimer(a.cfg.SpecTimeout)
	defer specT.Stop()
	var tick <-chan time.Time
	frames := a.frames
	done := ctx.Done()
	a.heard = time.Now()
	for {
		if a.finished(frames == nil) {
			_ = a.fw.send(frame{Kind: kBye, Node: a.node, Rank: -1})
			return 0
		}
		select {
		case f, ok := <-frames:
			if !ok {
				frames = nil
				a.teardown(fmt.Sprintf("lost flexrun (%s)", describeEnd(a.inErr)))
				continue
			}
			a.heard = time.Now()
			if code, stop := a.handle(f); stop {
				return code
			}
			if a.spec != nil && tick == nil {
				t := time.NewTicker(pingEvery(a.spec.Timeout))
				defer t.Stop()
				tick = t.C
			}
		case ex := <-a.exits:
			a.alive--
			a.reportExit(ex)
		case r := <-a.drained:
			a.undrained--
			_ = a.fw.send(frame{Kind: kEOF, Node: a.node, Rank: r})
		case <-tick:
			_ = a.fw.send(frame{Kind: kPing, Node: a.node, Rank: -1})
			if a.spec.Timeout > 0 && time.Since(a.heard) > a.spec.Timeout {
				a.heard = time.Now() // once
				a.teardown(fmt.Sprintf("lost flexrun (no word for %v)", a.spec.Timeout))
			}
		case <-specT.C:
			if a.spec == nil {
				fmt.Fprintf(a.cfg.Stderr, "flexrun agent: no job from flexrun within %v\n", a.cfg.SpecTimeout)
				return 1
			}
		case sig := <-a.cfg.Signals:
			a.teardown("received " + sig.String())
		case <-done:
			done = nil
			a.teardown("canceled")
		case <-a.killC:
			a.killC = nil
			a.signalAll(syscall.SIGKILL)
		}
	}
}

// finished reports whether the agent may exit: its ranks have all exited
// and their output has ended, and there is nothing more to wait for.
func (a *agent) finished(inputClosed bool) bool {
	if a.alive > 0 || a.undrained > 0 {
		return false
	}
	return a.sp != nil || a.tearing || inputClosed
}

// handle acts on one frame from flexrun.
func (a *agent) handle(f frame) (code int, stop bool) {
	switch f.Kind {
	case kSpec:
		if err := a.prepare(f.Data); err != nil {
			_ = a.fw.send(frame{Kind: kFail, Node: a.node, Rank: -1, Data: []byte(err.Error())})
			return 1, true
		}
		_ = a.fw.send(frame{Kind: kReady, Node: a.node, Rank: -1})
	case kGo:
		if a.spec == nil || a.sp != nil || a.tearing {
			return 0, false
		}
		if err := a.start(); err != nil {
			_ = a.fw.send(frame{Kind: kFail, Node: a.node, Rank: -1, Data: []byte(err.Error())})
			a.teardown("")
		}
	case kSig:
		n, err := strconv.Atoi(string(f.Data))
		if err != nil {
			return 0, false
		}
		sig := syscall.Signal(n)
		if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
			a.tearing = true
		}
		for _, rp := range a.ranks {
			if f.Rank < 0 || f.Rank == rp.p.Rank {
				rp.signal(sig)
			}
		}
	case kIn:
		if a.stdin != nil {
			a.stdin <- f.Data
		}
	case kInEOF:
		if a.stdin != nil {
			close(a.stdin)
			a.stdin = nil
		}
	case kBye:
		a.teardown("")
		if a.sp == nil {
			return 0, true
		}
	}
	return 0, false
}

// teardown ends the job on this host: SIGTERM to every rank, SIGKILL
// after the kill grace. why, when not empty, goes to flexrun as a note.
func (a *agent) teardown(why string) {
	if why != "" {
		_ = a.fw.send(frame{Kind: kNote, Node: a.node, Rank: -1, Data: []byte(why)})
		fmt.Fprintf(a.cfg.Stderr, "flexrun agent: %s; terminating %s\n", why, plural(a.alive, "rank"))
	}
	if a.tearing && a.killC != nil {
		return
	}
	a.tearing = true
	if a.alive == 0 {
		return
	}
	a.signalAll(syscall.SIGTERM)
	grace := DefaultKillGrace
	if a.spec != nil && a.spec.KillGrace > 0 {
		grace = a.spec.KillGrace
	}
	a.killC = time.After(grace)
}

func (a *agent) signalAll(sig syscall.Signal) {
	for _, rp := range a.ranks {
		rp.signal(sig)
		if sig == syscall.SIGTERM {
			rp.signal(syscall.SIGCONT) // a stopped rank acts on SIGTERM only once continued
		}
	}
}

// reportExit sends a rank's exit to flexrun and drains its output.
func (a *agent) reportExit(ex rankExit) {
	rp := a.ranks[ex.rank]
	var status string
	switch {
	case ex.state == nil:
		status = "error " + fmt.Sprint(ex.err)
	case ex.state.Sys().(syscall.WaitStatus).Signaled():
		status = "signal " + strconv.Itoa(int(ex.state.Sys().(syscall.WaitStatus).Signal()))
	default:
		status = "code " + strconv.Itoa(ex.state.ExitCode())
	}
	_ = a.fw.send(frame{Kind: kExit, Node: a.node, Rank: rp.p.Rank, Data: []byte(strconv.Itoa(rp.pid) + " " + status)})
	grace := a.spec.KillGrace
	go func() {
		rp.drain(grace)
		a.drained <- rp.p.Rank
	}()
}

func describeEnd(err error) string {
	if err == nil || err == io.EOF {
		return "connection closed"
	}
	return err.Error()
}

// pingEvery is the ping interval for a liveness timeout: a fifth of it,
// between 100 ms and 2 s.
func pingEvery(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return 2 * time.Second
	}
	return min(max(timeout/5, 100*time.Millisecond), 2*time.Second)
}
