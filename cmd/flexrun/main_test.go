package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/testenv"
)

// binaries are built once per test binary by TestMain.
type binaries struct {
	flexrun string
	probe   string // testdata/envprobe
	spin    string // launcher/clustertest/testdata/spin: an allreduce loop
	report  string // testdata/reporter: ranks that report as libnccl does, by script
}

// bins is set by TestMain before any test runs and only read afterwards.
var bins binaries

func TestMain(m *testing.M) {
	testenv.RunWithBinaries(m, "flexrun-test-", func(dir string) {
		bins = binaries{flexrun: filepath.Join(dir, "flexrun"), probe: filepath.Join(dir, "envprobe"), spin: filepath.Join(dir, "spin"), report: filepath.Join(dir, "reporter")}
	}, ".", "./testdata/envprobe", "../../launcher/clustertest/testdata/spin", "./testdata/reporter")
}

// result is a finished flexrun.
type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// runOpts adjusts one flexrun run.
type runOpts struct {
	env   []string // added to the test's environment
	stdin string
}

// flexrun runs the flexrun binary to completion (60 s at most).
func flexrun(t *testing.T, o runOpts, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.flexrun, args...)
	cmd.Env = append(os.Environ(), o.env...)
	cmd.Stdin = strings.NewReader(o.stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("flexrun %q did not finish in 60 s; stderr:\n%s", args, r.stderr)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("flexrun %q: %v", args, err)
	}
	r.code = cmd.ProcessState.ExitCode()
	return r
}

// live is a flexrun still running, its stdout read line by line.
type live struct {
	cmd    *exec.Cmd
	lines  chan string // stdout lines; closed at end of file
	stderr *bytes.Buffer
	exited chan struct{} // closed when Wait returned
	werr   error
}

// startFlexrun starts flexrun and returns once it is running.
func startFlexrun(t *testing.T, args ...string) *live {
	t.Helper()
	cmd := exec.Command(bins.flexrun, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	l := &live{cmd: cmd, lines: make(chan string, 1024), stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = l.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		defer close(l.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.lines <- sc.Text()
		}
	}()
	go func() {
		<-scanDone
		l.werr = cmd.Wait()
		close(l.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-l.exited:
		default:
			_ = cmd.Process.Kill()
			<-l.exited
		}
	})
	return l
}

// pids reads "pid RANK PID" lines until n ranks have reported (10 s at most).
func (l *live) pids(t *testing.T, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	deadline := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case line, ok := <-l.lines:
			if !ok {
				t.Fatalf("flexrun's stdout ended after %d of %d pid lines; stderr:\n%s", len(got), n, l.stderr)
			}
			var rank, pid int
			if _, err := fmt.Sscanf(line, "pid %d %d", &rank, &pid); err == nil {
				got[rank] = pid
			}
		case <-deadline:
			t.Fatalf("only %d of %d ranks reported a pid in 10 s", len(got), n)
		}
	}
	return got
}

// wait waits for flexrun to exit (limit at most) and returns its exit code.
func (l *live) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-l.exited:
	case <-time.After(limit):
		t.Fatalf("flexrun still running after %v; stderr:\n%s", limit, l.stderr)
	}
	return l.cmd.ProcessState.ExitCode()
}

// signaled returns the exit status of a process that ended by a signal.
func signaled(ps *os.ProcessState) (syscall.Signal, bool) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

// waitGone polls /proc until none of pids is a live envprobe, or fails the
// test after limit. Polling is the only way to observe other processes die.
func waitGone(t *testing.T, pids map[int]int, limit time.Duration) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
	for {
		var left []string
		for rank, pid := range pids {
			if alive(pid, "envprobe") {
				left = append(left, fmt.Sprintf("rank %d (pid %d)", rank, pid))
			}
		}
		if len(left) == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("still alive after %v: %s", limit, strings.Join(left, ", "))
		}
	}
}
