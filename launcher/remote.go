package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// agentLink is one ssh or srun process: its stdin carries frames to the
// agents, its stdout their frames back. An ssh link carries one agent, an
// srun link one per host of the step (told apart by srun's labels).
type agentLink struct {
	what     string // "ssh to HOST" or "srun": for messages
	cmd      *exec.Cmd
	in       io.WriteCloser
	fw       *frameWriter
	labelled bool
	log      hclog.Logger
	timeout  time.Duration // silence that counts as loss
	stderr   *tailBuffer
	linkAgents

	// bind, under srun, finds the host of an agent whose hello arrives
	// with a label not yet known (srun numbers the tasks in its own order).
	bind func(label int, hello []byte) *agentConn

	linkEnd
}

// linkAgents is the agents a link carries and when it was last heard;
// mu guards them.
type linkAgents struct {
	mu     sync.Mutex
	agents map[int]*agentConn // by node (srun: label, which is the node)
	heard  time.Time
	silent bool // killed for silence
}

// linkEnd is how the link's process ended.
type linkEnd struct {
	done chan struct{} // closed once the process has exited and the reader is done
	end  string        // how it ended, set before done closes
}

// agentConn is flexrun's view of the agent on one host.
type agentConn struct {
	host  Host
	node  int
	link  *agentLink
	hello chan agentHello // the hello, once
	reply chan error      // ready (nil) or fail, to the spec
	exits chan<- rankExit // the supervisor's

	mu     sync.Mutex
	info   agentHello
	ranks  map[int]*rankProc // by rank
	exited map[int]bool
	goSent bool // the agent was told to start its ranks
	// report receives the agent's --report-bindings lines; nil: logged.
	report io.Writer
}

// startLink starts argv with its stdin and stdout as the agent stream;
// setup runs before the first frame is read (to register agents).
func startLink(what string, argv []string, labelled bool, timeout time.Duration, log hclog.Logger, setup func(*agentLink)) (*agentLink, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	l := &agentLink{what: what, cmd: cmd, in: in, fw: newFrameWriter(in), labelled: labelled, log: log,
		timeout: timeout, stderr: &tailBuffer{max: 2048}, linkAgents: linkAgents{agents: map[int]*agentConn{}, heard: time.Now()},
		linkEnd: linkEnd{done: make(chan struct{})}}
	cmd.Stderr = l.stderr
	// Own process group: a ^C at flexrun's terminal must not kill ssh
	// before flexrun has told the agents to tear down.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if setup != nil {
		setup(l)
	}
	go l.read(out)
	return l, nil
}

// read dispatches the link's frames to its agents until the stream ends,
// then waits for the process and reports what is left as lost.
func (l *agentLink) read(out io.Reader) {
	remark := func(label int, line string) {
		l.log.Info("agent output that is not a frame", "link", l.what, "line", line)
	}
	fr := newFrameReader(out, l.labelled, remark)
	var err error
	for {
		var f frame
		var label int
		f, label, err = fr.next()
		if err != nil {
			break
		}
		l.mu.Lock()
		l.heard = time.Now()
		node := f.Node
		if l.labelled && label >= 0 {
			node = label
		}
		a := l.agents[node]
		l.mu.Unlock()
		if a == nil && f.Kind == kHello && l.bind != nil {
			if a = l.bind(node, f.Data); a != nil {
				l.mu.Lock()
				l.agents[node] = a
				l.mu.Unlock()
			}
		}
		if a == nil {
			l.log.Warn("frame from an unknown agent", "link", l.what, "node", node, "kind", f.Kind)
			continue
		}
		a.onFrame(f)
	}
	_ = l.in.Close()
	l.fw.stop()
	werr := l.cmd.Wait()
	l.end = l.describeEnd(err, werr)
	l.mu.Lock()
	agents := make([]*agentConn, 0, len(l.agents))
	for _, a := range l.agents {
		agents = append(agents, a)
	}
	l.mu.Unlock()
	for _, a := range agents {
		a.lost(l.end)
	}
	close(l.done)
}

func (l *agentLink) describeEnd(readErr, waitErr error) string {
	l.mu.Lock()
	silent := l.silent
	l.mu.Unlock()
	var b strings.Builder
	if silent {
		fmt.Fprintf(&b, "no word from its agent for %v", l.timeout)
	} else {
		b.WriteString(l.what + " ")
		var ee *exec.ExitError
		switch {
		case errors.As(waitErr, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				fmt.Fprintf(&b, "was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
			} else {
				fmt.Fprintf(&b, "exited with status %d", ee.ExitCode())
			}
		case waitErr != nil:
			b.WriteString("failed: " + waitErr.Error())
		case readErr != nil && readErr != io.EOF:
			b.WriteString("sent garbage: " + readErr.Error())
		default:
			b.WriteString("ended")
		}
	}
	tail := l.stderr.String()
	if tail != "" {
		b.WriteString(": " + tail)
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) && !silent {
		b.WriteString(notFoundHint(ee.ExitCode(), tail))
	}
	return b.String()
}

// watch kills the link's process when nothing arrives for the timeout
// (a dead host or network); the reader then reports the loss. It returns
// when the link is done.
func (l *agentLink) watch() {
	l.mu.Lock()
	l.heard = time.Now() // agents ping once they have the job, which comes now
	l.mu.Unlock()
	t := time.NewTicker(pingEvery(l.timeout))
	defer t.Stop()
	// Silence is judged when the timeout since the last word runs out, not
	// at the next ping (which came up to a ping's interval, 2 s, late).
	quiet := time.NewTimer(l.timeout)
	defer quiet.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			_ = l.fw.send(frame{Kind: kPing, Node: -1, Rank: -1})
		case <-quiet.C:
			l.mu.Lock()
			left := l.timeout - time.Since(l.heard)
			if left < 0 {
				l.silent = true
			}
			l.mu.Unlock()
			if left < 0 {
				l.kill()
				return
			}
			quiet.Reset(left + time.Millisecond)
		}
	}
}

// kill ends the link's process (ssh or srun) and its process group.
func (l *agentLink) kill() {
	if l.cmd.Process != nil {
		_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// close says bye to the agents, closes their input and waits up to grace
// for the process to end before killing it.
func (l *agentLink) close(grace time.Duration) {
	_ = l.fw.send(frame{Kind: kBye, Node: -1, Rank: -1})
	l.fw.flush(grace / 2)
	_ = l.in.Close()
	if closedWithin(l.done, grace) {
		return
	}
	l.kill()
	<-l.done
}

// onFrame handles one frame from the agent (on the link's reader).
func (a *agentConn) onFrame(f frame) {
	switch f.Kind {
	case kHello:
		var h agentHello
		if err := json.Unmarshal(f.Data, &h); err != nil {
			h.Protocol = -1
		}
		select {
		case a.hello <- h:
		default:
		}
	case kReady:
		a.sendReply(nil)
	case kFail:
		a.mu.Lock()
		running := a.goSent
		a.mu.Unlock()
		if running { // a rank could not start: the host's ranks are lost
			a.lost("its agent failed: " + string(f.Data))
		} else {
			a.sendReply(errors.New(string(f.Data)))
		}
	case kStart:
		a.link.log.Debug("rank started", "host", a.host.Name, "rank", f.Rank, "pid", string(f.Data))
	case kOut, kErr:
		if rp := a.rank(f.Rank); rp != nil {
			i := 0
			if f.Kind == kErr {
				i = 1
			}
			a.mu.Lock()
			w := rp.sinks[i]
			a.mu.Unlock()
			if w != nil {
				_, _ = w.Write(f.Data)
			}
		}
	case kExit:
		a.onExit(f)
	case kEOF:
		if rp := a.rank(f.Rank); rp != nil {
			a.closeSinks(rp)
		}
	case kNote:
		a.link.log.Warn("agent: "+string(f.Data), "host", a.host.Name)
	case kBind:
		a.mu.Lock()
		w := a.report
		a.mu.Unlock()
		if w == nil {
			a.link.log.Info(string(f.Data))
		} else {
			fmt.Fprintln(w, string(f.Data))
		}
	}
}

func (a *agentConn) sendReply(err error) bool {
	select {
	case a.reply <- err:
		return true
	default:
		return false
	}
}

func (a *agentConn) rank(r int) *rankProc {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ranks[r]
}

// onExit turns an exit frame ("PID code N", "PID signal N", "PID error
// TEXT") into the supervisor's rankExit.
func (a *agentConn) onExit(f frame) {
	pidS, rest, _ := strings.Cut(string(f.Data), " ")
	kind, val, _ := strings.Cut(rest, " ")
	ex := rankExit{rank: f.Rank, remote: true}
	ex.pid, _ = strconv.Atoi(pidS)
	n, _ := strconv.Atoi(val)
	switch kind {
	case "code":
		ex.code = n
	case "signal":
		ex.sig = syscall.Signal(n)
	default:
		ex.lost = "could not be waited for: " + val
	}
	a.mu.Lock()
	if a.exited[f.Rank] || a.ranks[f.Rank] == nil {
		a.mu.Unlock()
		return
	}
	a.exited[f.Rank] = true
	a.mu.Unlock()
	a.exits <- ex
}

// lost reports every rank of the host that has not exited as lost with
// the host, and ends their output.
func (a *agentConn) lost(why string) {
	a.mu.Lock()
	var gone []int
	for r := range a.ranks {
		if !a.exited[r] && a.goSent {
			gone = append(gone, r)
			a.exited[r] = true
		}
	}
	rps := make([]*rankProc, 0, len(a.ranks))
	for _, rp := range a.ranks {
		rps = append(rps, rp)
	}
	a.mu.Unlock()
	slices.Sort(gone)
	for _, r := range gone {
		a.exits <- rankExit{rank: r, remote: true, lost: "host " + a.host.Name + " lost: " + why, lostWith: gone}
	}
	for _, rp := range rps {
		a.closeSinks(rp)
	}
	select {
	case a.reply <- fmt.Errorf("%s", why):
	default:
	}
}

// closeSinks ends a remote rank's output streams (idempotent).
func (a *agentConn) closeSinks(rp *rankProc) {
	a.mu.Lock()
	s := rp.sinks
	rp.sinks = [2]*os.File{}
	a.mu.Unlock()
	closeAll(s[:]...)
}

// signal asks the agent to send sig to rank's process group.
func (a *agentConn) signal(rank int, sig syscall.Signal) {
	_ = a.link.fw.send(frame{Kind: kSig, Node: a.node, Rank: rank, Data: []byte(strconv.Itoa(int(sig)))})
}

// tailBuffer keeps the last max bytes written to it (ssh's stderr).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

// String is the tail on one line.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(strings.Fields(strings.ReplaceAll(string(t.b), "\r", "")), " ")
}
