package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
)

// fakeBootstrap stands in for bootstrap.Server: a real listener (so the
// address is a real port) that records Abort and Close.
type fakeBootstrap struct {
	ln     net.Listener
	mu     sync.Mutex
	aborts []error
	closed bool
}

func (f *fakeBootstrap) Addr() string { return f.ln.Addr().String() }
func (f *fakeBootstrap) Abort(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aborts = append(f.aborts, err)
}
func (f *fakeBootstrap) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return f.ln.Close()
}

// testJob is a job of sh -c script on this machine, with its bootstrap and
// output captured.
type testJob struct {
	Job
	srv            *fakeBootstrap
	started        int // NewBootstrap calls
	stdout, stderr *strings.Builder
}

func newTestJob(t *testing.T, np int, script string) *testJob {
	t.Helper()
	tj := &testJob{stdout: &strings.Builder{}, stderr: &strings.Builder{}}
	m := Machine{Hostname: "testhost", CPUs: 1}
	tj.Job = Job{
		Program: "/bin/sh", Args: []string{"-c", script},
		Layout: Layout{NP: np, Oversubscribe: true}, Machine: &m,
		Output: Output{Stdout: tj.stdout, Stderr: tj.stderr},
		NewBootstrap: func(BootstrapConfig) (Bootstrap, error) {
			tj.started++
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			tj.srv = &fakeBootstrap{ln: ln}
			return tj.srv, nil
		},
	}
	return tj
}

func TestRunSuccess(t *testing.T) {
	tj := newTestJob(t, 3, `echo "rank $FLEXLINK_RANK"; [ "$FLEXLINK_RANK" = 0 ] && cat; exit 0`)
	tj.Stdin = strings.NewReader("from stdin\n") // not a file: copied through a pipe
	code, err := Run(context.Background(), tj.Job)
	if code != 0 || err != nil {
		t.Fatalf("Run = %d, %v; stderr %q", code, err, tj.stderr)
	}
	for _, want := range []string{"rank 0\n", "rank 1\n", "rank 2\n", "from stdin\n"} {
		if !strings.Contains(tj.stdout.String(), want) {
			t.Errorf("stdout lacks %q: %q", want, tj.stdout)
		}
	}
	if len(tj.srv.aborts) != 0 || !tj.srv.closed {
		t.Errorf("bootstrap: aborts %v, closed %v", tj.srv.aborts, tj.srv.closed)
	}
}

func TestRunRankFailureAbortsBootstrap(t *testing.T) {
	tj := newTestJob(t, 3, `[ "$FLEXLINK_RANK" = 1 ] && exit 5; exec sleep 30`)
	start := time.Now()
	code, err := Run(context.Background(), tj.Job)
	var je *JobError
	if code != 5 || !errors.As(err, &je) || je.Rank != 1 || je.Code != 5 || !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("Run = %d, %#v", code, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v: the others were not torn down promptly", d)
	}
	line := fmt.Sprintf("flexrun: rank 1 (host testhost, pid %d) exited with status 5; terminating 2 other ranks\n", je.PID)
	if tj.stderr.String() != line {
		t.Errorf("stderr %q, want %q", tj.stderr, line)
	}
	if len(tj.srv.aborts) != 1 || !errors.Is(tj.srv.aborts[0], errs.ErrPeerLost) ||
		!strings.Contains(tj.srv.aborts[0].Error(), "rank 1 (host testhost") || !tj.srv.closed {
		t.Errorf("bootstrap: aborts %v, closed %v", tj.srv.aborts, tj.srv.closed)
	}
}

// readyJob starts a job whose ranks print "ready" after setting up (trap
// runs before the echo) and waits until all have, reading Stdout through a
// pipe. It returns the channel Run's result arrives on.
func readyJob(t *testing.T, tj *testJob, sigs chan os.Signal, np int) (<-chan error, time.Time) {
	t.Helper()
	pr, pw := io.Pipe()
	tj.Stdout, tj.Signals = pw, sigs
	result := make(chan error, 1)
	go func() {
		code, err := Run(context.Background(), tj.Job)
		pw.Close()
		result <- fmt.Errorf("code %d: %w", code, err)
	}()
	sc := bufio.NewScanner(pr)
	for ready := 0; ready < np; {
		if !sc.Scan() {
			t.Fatalf("output ended with %d of %d ranks ready; stderr %q", ready, np, tj.stderr)
		}
		if sc.Text() == "ready" {
			ready++
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	return result, time.Now()
}

func TestRunKillGraceEscalates(t *testing.T) {
	tests := []struct {
		name    string
		signals []os.Signal
		min     time.Duration // the grace must be waited out
		max     time.Duration
	}{
		{"SIGKILL after the grace", []os.Signal{syscall.SIGTERM}, 400 * time.Millisecond, 5 * time.Second},
		{"second SIGINT kills at once", []os.Signal{syscall.SIGINT, syscall.SIGINT}, 0, 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The ranks ignore SIGTERM; only SIGKILL ends them.
			tj := newTestJob(t, 2, `trap '' TERM; echo ready; exec sleep 30`)
			tj.KillGrace = 400 * time.Millisecond
			if len(tc.signals) > 1 {
				tj.KillGrace = 20 * time.Second
			}
			sigs := make(chan os.Signal, 2)
			result, start := readyJob(t, tj, sigs, 2)
			for _, s := range tc.signals {
				sigs <- s
			}
			var err error
			select {
			case err = <-result:
			case <-time.After(tc.max + 5*time.Second):
				t.Fatalf("Run did not return")
			}
			d := time.Since(start)
			want := 128 + int(tc.signals[0].(syscall.Signal))
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("code %d: ", want)) || !errors.Is(err, errs.ErrAborted) {
				t.Errorf("Run: %v, want exit %d", err, want)
			}
			if d < tc.min || d > tc.max {
				t.Errorf("took %v, want between %v and %v", d, tc.min, tc.max)
			}
		})
	}
}

func TestRunContextCanceled(t *testing.T) {
	tj := newTestJob(t, 2, `echo ready; exec sleep 30`)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	tj.Stdout = pw
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, tj.Job)
		pw.Close()
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	sc.Scan() // one rank is up
	cancel()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	select {
	case err := <-done:
		if !errors.Is(err, errs.ErrAborted) || !strings.Contains(err.Error(), "canceled") {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestRunRefusesBeforeStarting(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Job)
		code   int
		want   string
		stdout string
	}{
		{"program not found", func(j *Job) { j.Program = "/nonexistent/prog" }, 127, "program /nonexistent/prog", ""},
		{"not executable", func(j *Job) { j.Program = writeScript(t, 0o644) }, 126, "permission denied", ""},
		{"oversubscribed", func(j *Job) { j.Oversubscribe = false }, 1, "3 ranks requested but only 1 slots", ""},
		{"unreachable host", func(j *Job) { j.Hosts = []Host{{Name: "elsewhere", Slots: 4}}; j.Remote.SSH = "false" }, 1,
			"cannot start flexrun's agent on 1 host; no rank was started\n  host elsewhere: ssh to elsewhere exited with status 1", ""},
		{"no bootstrap", func(j *Job) { j.NewBootstrap = nil }, 1, "NewBootstrap is nil", ""},
		{"dry run", func(j *Job) { j.DryRun = true }, 0, "", "flexrun: dry run: 3 ranks: /bin/sh -c exit 0\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tj := newTestJob(t, 3, "exit 0")
			tc.edit(&tj.Job)
			code, err := Run(context.Background(), tj.Job)
			if code != tc.code || (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Run = %d, %v; want %d, %q", code, err, tc.code, tc.want)
			}
			if tj.started != 0 {
				t.Errorf("the bootstrap server was started")
			}
			if !strings.HasPrefix(tj.stdout.String(), tc.stdout) {
				t.Errorf("stdout %q, want it to start with %q", tj.stdout, tc.stdout)
			}
		})
	}
}

// writeScript writes a shell script without a #! line (so exec fails with
// "exec format error") with the given mode.
func writeScript(t *testing.T, mode os.FileMode) string {
	t.Helper()
	p := t.TempDir() + "/prog"
	if err := os.WriteFile(p, []byte("echo hi\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// A program that passes the look-up but cannot be executed fails at start:
// the bootstrap was started, so it is aborted and closed.
func TestRunStartFailure(t *testing.T) {
	tj := newTestJob(t, 2, "")
	tj.Program = writeScript(t, 0o755)
	code, err := Run(context.Background(), tj.Job)
	var je *JobError
	if code != 1 || err == nil || errors.As(err, &je) || !strings.Contains(err.Error(), "start rank 0 (host testhost)") {
		t.Fatalf("Run = %d, %v", code, err)
	}
	if len(tj.srv.aborts) != 1 || !errors.Is(tj.srv.aborts[0], errs.ErrAborted) || !tj.srv.closed {
		t.Errorf("bootstrap: aborts %v, closed %v", tj.srv.aborts, tj.srv.closed)
	}
	if tj.stderr.Len() != 0 {
		t.Errorf("stderr %q: Run's caller reports a start failure", tj.stderr)
	}
}

// A rank's children are in its process group: teardown reaches them, also
// those of the rank that failed.
func TestRunTeardownReachesChildren(t *testing.T) {
	// Rank 1 fails once ranks 0 and 2 have started their children and said
	// so through a FIFO (opened read-write by rank 1, so it never sees EOF).
	fifo := t.TempDir() + "/fifo"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tj := newTestJob(t, 3, `sleep 30 & echo "child $!"
if [ "$FLEXLINK_RANK" = 1 ]; then exec 3<>"$FIFO"; read a <&3; read b <&3; exit 4; fi
echo up > "$FIFO"; wait`)
	tj.Environ = append(os.Environ(), "FIFO="+fifo)
	tj.KillGrace = 20 * time.Second // the drain must not be what kills them
	tj.Timeout = 20 * time.Second   // in case the FIFO handshake breaks
	start := time.Now()
	code, err := Run(context.Background(), tj.Job)
	if code != 4 {
		t.Fatalf("Run = %d, %v", code, err)
	}
	var pids []int
	for _, line := range strings.Split(strings.TrimSpace(tj.stdout.String()), "\n") {
		var pid int
		if _, err := fmt.Sscanf(line, "child %d", &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 3 {
		t.Fatalf("children reported: %q", tj.stdout)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v: the drain waited for the children", d)
	}
	waitExited(t, pids, 3*time.Second)
}

// waitExited polls /proc until none of pids is a live process (zombies
// count as gone), or fails after limit; polling is the only way to watch
// processes that are not our children.
func waitExited(t *testing.T, pids []int, limit time.Duration) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
	for {
		var alive []int
		for _, pid := range pids {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if i := strings.LastIndexByte(string(stat), ')'); err == nil && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X' {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("still alive after %v: %v", limit, alive)
		}
	}
}
