package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
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
func (s *spawner) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// stop lets the spawner's thread exit; call it once every rank is reaped.
func (s *spawner) stop() { close(s.release) }

// rankProc is one started rank.
type rankProc struct {
	p       Placement
	cmd     *exec.Cmd
	pid     int
	outR    *os.File      // read end of the rank's stdout pipe
	errR    *os.File      // read end of the rank's stderr pipe
	outDone chan struct{} // closed when both streams are forwarded to the end
}

// rankSpec is what startRank needs besides the spawner.
type rankSpec struct {
	path      string // resolved program
	args      []string
	env       []string
	p         Placement
	stdin     *os.File // nil: /dev/null
	stdout    *LockedWriter
	stderr    *LockedWriter
	tag       bool
	outputDir string // "": no per-rank files
	maxLine   int
}

// startRank starts one rank in its own process group, with Pdeathsig
// SIGKILL, its output piped to forwarders.
func startRank(sp *spawner, rs rankSpec) (*rankProc, error) {
	var prefix []byte
	if rs.tag {
		prefix = []byte("[" + strconv.Itoa(rs.p.Rank) + "] ")
	}
	var files [2]*os.File // per-rank copies of stdout, stderr
	if rs.outputDir != "" {
		dir := filepath.Join(rs.outputDir, "rank."+strconv.Itoa(rs.p.Rank))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("output dir of rank %d: %w", rs.p.Rank, err)
		}
		for i, name := range []string{"stdout", "stderr"} {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				closeAll(files[:]...)
				return nil, fmt.Errorf("output dir of rank %d: %w", rs.p.Rank, err)
			}
			files[i] = f
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(files[:]...)
		return nil, fmt.Errorf("stdout pipe of rank %d: %w", rs.p.Rank, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(append(files[:], outR, outW)...)
		return nil, fmt.Errorf("stderr pipe of rank %d: %w", rs.p.Rank, err)
	}
	cmd := exec.Command(rs.path, rs.args...)
	cmd.Env = rs.env
	cmd.Stdout, cmd.Stderr = outW, errW
	if rs.stdin != nil {
		cmd.Stdin = rs.stdin
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = sp.start(cmd)
	closeAll(outW, errW)
	if err != nil {
		closeAll(append(files[:], outR, errR)...)
		return nil, fmt.Errorf("start rank %d (host %s): %w", rs.p.Rank, rs.p.Host, err)
	}
	rp := &rankProc{p: rs.p, cmd: cmd, pid: cmd.Process.Pid, outR: outR, errR: errR, outDone: make(chan struct{})}
	fwd := func(r *os.File, dst *LockedWriter, file *os.File, done chan<- struct{}) {
		f := forwarder{dst: dst, prefix: prefix, max: rs.maxLine}
		if file != nil {
			f.file = file
		}
		_ = f.run(r) // a broken destination must not stop the job
		closeAll(r, file)
		done <- struct{}{}
	}
	done := make(chan struct{}, 2)
	go fwd(outR, rs.stdout, files[0], done)
	go fwd(errR, rs.stderr, files[1], done)
	go func() {
		<-done
		<-done
		close(rp.outDone)
	}()
	return rp, nil
}

// drain waits up to grace for the rank's output to reach end of file once
// the rank has exited (a child it left behind may hold the pipes open). Past
// that it kills what is left of the rank's process group and reads for at
// most one more second.
func (rp *rankProc) drain(grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-rp.outDone:
		return
	case <-t.C:
	}
	rp.signal(syscall.SIGKILL)
	deadline := time.Now().Add(time.Second)
	_ = rp.outR.SetReadDeadline(deadline)
	_ = rp.errR.SetReadDeadline(deadline)
	<-rp.outDone
}

// signal sends sig to the rank's process group, reaching its children too.
// A group that is gone already (ESRCH) is not an error worth reporting.
func (rp *rankProc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-rp.pid, sig)
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}
