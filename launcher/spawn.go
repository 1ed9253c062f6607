package launcher

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spawner starts processes from one goroutine locked to its OS thread.
// Linux delivers a child's parent-death signal (Pdeathsig) when the thread
// that forked it exits, not the process; Go may retire idle threads, so
// every rank is forked from this one thread, which lives until the job
// ends. The goroutine never unlocks: when it returns its thread exits, and
// any rank still alive then gets SIGKILL.
type spawner struct {
	reqs    chan func()
	release chan struct{}
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan func()), release: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		for {
			select {
			case f := <-s.reqs:
				f()
			case <-s.release:
				return
			}
		}
	}()
	return s
}

// start runs cmd.Start on the spawner's thread. Not to be called after stop.
// cpus, when not nil, is the child's CPU affinity: the thread sets it on
// itself (sched_setaffinity) just before the fork, the child inherits it
// from the forking thread, and the thread's own mask is restored after.
func (s *spawner) start(cmd *exec.Cmd, cpus []int) error {
	errc := make(chan error, 1)
	s.reqs <- func() {
		if cpus == nil {
			errc <- cmd.Start()
			return
		}
		var saved unix.CPUSet
		if err := unix.SchedGetaffinity(0, &saved); err != nil {
			errc <- fmt.Errorf("read cpu affinity: %w", err)
			return
		}
		set := cpuSet(cpus)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- fmt.Errorf("bind to cpus %s: %w", FormatCPUList(cpus), err)
			return
		}
		err := cmd.Start()
		if rerr := unix.SchedSetaffinity(0, &saved); rerr != nil && err == nil {
			err = fmt.Errorf("restore cpu affinity: %w", rerr)
		}
		errc <- err
	}
	return <-errc
}

// stop lets the spawner's thread exit; call it once every rank is reaped.
func (s *spawner) stop() { close(s.release) }

// rankProc is one started rank: a child of this process, or (agent set) a
// rank that an agent runs on another host.
type rankProc struct {
	p       Placement
	cmd     *exec.Cmd     // nil for a remote rank
	pid     int           // 0 until a remote rank's agent reports it
	outR    *os.File      // read end of the rank's stdout pipe
	errR    *os.File      // read end of the rank's stderr pipe
	outDone chan struct{} // closed when both streams are forwarded to the end

	agent *agentConn  // the agent running a remote rank
	sinks [2]*os.File // remote rank: write ends the agent's output frames go to
}

// rankSpec is what startRank needs besides the spawner.
type rankSpec struct {
	path  string // resolved program
	args  []string
	env   []string
	dir   string // working directory; "": this process's
	p     Placement
	stdin *os.File // nil: /dev/null
	cpus  []int    // CPU affinity (--bind-to); nil: inherited
	rankOutput
}

// rankOutput is where a rank's output goes.
type rankOutput struct {
	stdout    *LockedWriter
	stderr    *LockedWriter
	tag       bool
	stamp     bool   // --timestamp-output
	outputDir string // "": no per-rank files
	maxLine   int
	// relay, when set, receives the rank's raw output instead of the line
	// forwarder (stream 0 is stdout, 1 stderr); an agent sends it on.
	relay func(stream int, r io.Reader)
}

// startRank starts one rank in its own process group, with Pdeathsig
// SIGKILL, its output piped to forwarders.
func startRank(sp *spawner, rs rankSpec) (*rankProc, error) {
	o, err := openOutput(rs)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(rs.path, rs.args...)
	cmd.Env, cmd.Dir = rs.env, rs.dir
	cmd.Stdout, cmd.Stderr = o.outW, o.errW
	if rs.stdin != nil {
		cmd.Stdin = rs.stdin
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = sp.start(cmd, rs.cpus)
	closeAll(o.outW, o.errW)
	if err != nil {
		closeAll(append(o.files[:], o.outR, o.errR)...)
		return nil, fmt.Errorf("start rank %d (host %s): %w", rs.p.Rank, rs.p.Host, err)
	}
	rp := &rankProc{p: rs.p, cmd: cmd, pid: cmd.Process.Pid, outR: o.outR, errR: o.errR, outDone: make(chan struct{})}
	rp.forward(rs, o.files)
	return rp, nil
}

// remoteRank is the local end of a rank an agent runs: the agent's output
// frames are written to pipes whose read ends are forwarded exactly like a
// local rank's output.
func remoteRank(rs rankSpec, a *agentConn) (*rankProc, error) {
	o, err := openOutput(rs)
	if err != nil {
		return nil, err
	}
	rp := &rankProc{p: rs.p, outR: o.outR, errR: o.errR, outDone: make(chan struct{}), agent: a, sinks: [2]*os.File{o.outW, o.errW}}
	rp.forward(rs, o.files)
	return rp, nil
}

// outputs are where a rank's output goes: its --output-dir files (nil
// without one) and the pipes of its stdout and stderr.
type outputs struct {
	files                  [2]*os.File
	outR, outW, errR, errW *os.File
}

// openOutput creates the rank's output files and pipes; on an error none
// is left open.
func openOutput(rs rankSpec) (outputs, error) {
	files, err := outputFiles(rs)
	if err != nil {
		return outputs{}, err
	}
	o := outputs{files: files}
	if o.outR, o.outW, o.errR, o.errW, err = outputPipes(rs.p.Rank); err != nil {
		closeAll(files[:]...)
		return outputs{}, err
	}
	return o, nil
}

// outputFiles creates DIR/rank.N/stdout and stderr for --output-dir.
func outputFiles(rs rankSpec) ([2]*os.File, error) {
	var files [2]*os.File
	if rs.outputDir == "" {
		return files, nil
	}
	dir := filepath.Join(rs.outputDir, "rank."+strconv.Itoa(rs.p.Rank))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return files, fmt.Errorf("output dir of rank %d: %w", rs.p.Rank, err)
	}
	for i, name := range []string{"stdout", "stderr"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			closeAll(files[:]...)
			return files, fmt.Errorf("output dir of rank %d: %w", rs.p.Rank, err)
		}
		files[i] = f
	}
	return files, nil
}

func outputPipes(rank int) (outR, outW, errR, errW *os.File, err error) {
	if outR, outW, err = os.Pipe(); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("stdout pipe of rank %d: %w", rank, err)
	}
	if errR, errW, err = os.Pipe(); err != nil {
		closeAll(outR, outW)
		return nil, nil, nil, nil, fmt.Errorf("stderr pipe of rank %d: %w", rank, err)
	}
	return outR, outW, errR, errW, nil
}

// forward copies the rank's two streams (to forwarders, or to rs.relay)
// and closes outDone when both have ended.
func (rp *rankProc) forward(rs rankSpec, files [2]*os.File) {
	fwd := func(stream int, r *os.File, dst *LockedWriter, file *os.File, done chan<- struct{}) {
		if rs.relay != nil {
			rs.relay(stream, r)
		} else {
			f := forwarder{dst: dst, max: rs.maxLine, prefix: outputPrefix(rs.p.Rank, stream, rs.tag, rs.stamp)}
			if rs.stamp {
				f.stamp = time.Now
			}
			if file != nil {
				f.file = file
			}
			_ = f.run(r) // a broken destination must not stop the job
		}
		closeAll(r, file)
		done <- struct{}{}
	}
	done := make(chan struct{}, 2)
	go fwd(0, rp.outR, rs.stdout, files[0], done)
	go fwd(1, rp.errR, rs.stderr, files[1], done)
	go func() {
		<-done
		<-done
		close(rp.outDone)
	}()
}

// drain waits up to grace for the rank's output to reach end of file once
// the rank has exited (a child it left behind may hold the pipes open). Past
// that it kills what is left of the rank's process group and reads for at
// most one more second. A remote rank's agent does that on its host; here
// its output gets the grace plus a second for the agent's last frames.
func (rp *rankProc) drain(grace time.Duration) {
	if rp.agent != nil {
		grace += time.Second
	}
	if closedWithin(rp.outDone, grace) {
		return
	}
	if rp.agent != nil {
		rp.agent.closeSinks(rp)
		<-rp.outDone
		return
	}
	rp.signal(syscall.SIGKILL)
	deadline := time.Now().Add(time.Second)
	_ = rp.outR.SetReadDeadline(deadline)
	_ = rp.errR.SetReadDeadline(deadline)
	<-rp.outDone
}

// signal sends sig to the rank's process group, reaching its children too
// (through its agent for a remote rank). A group that is gone already
// (ESRCH) is not an error worth reporting.
func (rp *rankProc) signal(sig syscall.Signal) {
	if rp.agent != nil {
		rp.agent.signal(rp.p.Rank, sig)
		return
	}
	_ = syscall.Kill(-rp.pid, sig)
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}
