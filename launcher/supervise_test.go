package launcher

import (
	"bytes"
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/flexlink/flexlink/internal/errs"
)

type nopBootstrap struct{ aborted error }

func (b *nopBootstrap) Addr() string    { return "127.0.0.1:0" }
func (b *nopBootstrap) Abort(err error) { b.aborted = err }
func (b *nopBootstrap) Close() error    { return nil }

// TestJudge: the cause is a lost host, else a stopped rank, else the first
// rank to end that is not known to have failed because of a peer; with
// ranks on other hosts a signal goes before an exit status.
func TestJudge(t *testing.T) {
	// Ends are seen 100 ms apart (more than sameTime) unless moved.
	at := func(order int) time.Time { return time.Unix(0, 0).Add(time.Duration(order) * 100 * time.Millisecond) }
	killed := func(rank, order int) outcome {
		return outcome{rank: rank, pid: 100 + rank, host: "h", kind: endSignal, code: 137, how: "was killed by signal 9 (killed)", order: order, at: at(order)}
	}
	status := func(rank, order, code int) outcome {
		k := endStatus
		if code == ExitPeerLost {
			k = endPeerLost
		}
		return outcome{rank: rank, pid: 100 + rank, host: "h", kind: k, code: code, how: "exited with status " + strconv.Itoa(code), order: order, at: at(order)}
	}
	// soon moves an end to sameTime after the one seen first.
	soon := func(o outcome) outcome { o.at = at(1).Add(sameTime); return o }
	stopped := outcome{rank: 2, pid: 102, host: "h", kind: endStopped, code: 147, how: "was stopped by signal 19 (SIGSTOP)", order: 9}
	lost := outcome{rank: 2, host: "h2", kind: endHost, code: 1, lost: "host h2 lost: no word from its agent for 3s", lostWith: []int{2, 3}, order: 5, remote: true}
	remote := func(o outcome) outcome { o.remote = true; return o }
	tests := []struct {
		name   string
		outs   []outcome
		ev     evidence
		cause  int
		conseq []int
		lines  []string // with 1 rank still to terminate
	}{
		{"kill first, the survivors exit after it", []outcome{killed(3, 1), status(0, 2, 3), status(1, 3, 3)}, evidence{}, 3, []int{0, 1},
			[]string{"rank 3 (host h, pid 103) was killed by signal 9 (killed); terminating 1 other rank", "ranks 0, 1 stopped: peer rank 3 lost"}},
		{"exit 3 first, the survivors exit 3 too", []outcome{status(1, 2, 3), status(2, 1, 3), status(0, 3, 3)}, evidence{}, 2, []int{0, 1},
			[]string{"rank 2 (host h, pid 102) exited with status 3; terminating 1 other rank", "ranks 0, 1 stopped: peer rank 2 lost"}},
		{"one host: order decides over the signal", []outcome{killed(0, 2), status(1, 1, 1)}, evidence{}, 1, []int{0},
			[]string{"rank 1 (host h, pid 101) exited with status 1; terminating 1 other rank", "rank 0 stopped: peer rank 1 lost"}},
		{"one host: a signal within sameTime of a status goes first", []outcome{status(1, 1, 3), soon(killed(0, 2)), status(2, 3, 3)}, evidence{}, 0, []int{1, 2}, nil},
		{"the bootstrap's first loss over an earlier exit", []outcome{status(1, 1, 3), status(2, 2, 3), status(0, 3, 3)}, evidence{lostFirst: ptr(2)}, 2, []int{0, 1}, nil},
		{"the server's own finding over a second-hand report that came first", []outcome{status(1, 1, 1), status(0, 2, 1), status(3, 3, 1), status(2, 4, 1)},
			evidence{reporters: map[int]bool{1: true}, lostFirst: ptr(3)}, 3, []int{0, 1, 2}, nil},
		{"the server's own finding over a signal seen first", []outcome{killed(0, 1), status(3, 2, 3)}, evidence{lostFirst: ptr(3)}, 3, []int{0}, nil},
		{"a lost rank that exited ExitPeerLost is no cause", []outcome{status(0, 1, ExitPeerLost), killed(2, 2)}, evidence{lostFirst: ptr(0)}, 2, []int{0}, nil},
		{"a lost rank that reported a lost peer is no cause", []outcome{status(0, 1, 1), status(2, 2, 3)}, evidence{reporters: map[int]bool{0: true}, lostFirst: ptr(0)}, 2, []int{0}, nil},
		{"the first loss, but stopped goes first", []outcome{status(1, 1, 3), stopped}, evidence{lostFirst: ptr(1)}, 2, []int{1}, nil},
		{"ExitPeerLost is a consequence even when first", []outcome{status(0, 1, ExitPeerLost), status(3, 2, 3)}, evidence{}, 3, []int{0}, nil},
		{"a reporter is a consequence even when first", []outcome{status(0, 1, 1), status(3, 2, 1)}, evidence{reporters: map[int]bool{0: true}}, 3, []int{0}, nil},
		{"only consequences: the first of them", []outcome{status(1, 2, ExitPeerLost), status(0, 1, ExitPeerLost)}, evidence{}, 0, []int{1}, nil},
		{"stopped rank over earlier exits", []outcome{status(0, 1, 3), status(1, 2, 3), stopped}, evidence{}, 2, []int{0, 1},
			[]string{"rank 2 (host h, pid 102) was stopped by signal 19 (SIGSTOP); terminating 1 other rank", "ranks 0, 1 stopped: peer rank 2 lost"}},
		{"remote: signal over an earlier status", []outcome{remote(status(0, 1, 1)), remote(killed(3, 2))}, evidence{}, 3, []int{0}, nil},
		{"remote: lost host over everything", []outcome{remote(killed(0, 1)), remote(status(1, 2, 1)), lost, remote(killed(3, 6))}, evidence{}, 2, []int{0, 1},
			[]string{"host h2 lost: no word from its agent for 3s (ranks 2, 3 gone with it); terminating 1 other rank", "ranks 0, 1 stopped: peer host h2 lost"}},
		{"alone", []outcome{status(2, 1, 5)}, evidence{}, 2, nil, []string{"rank 2 (host h, pid 102) exited with status 5; terminating 1 other rank"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Every order of arrival gives the same verdict.
			for _, outs := range permutations(tc.outs) {
				v, ok := judge(outs, tc.ev)
				if !ok || v.cause.rank != tc.cause || !slices.Equal(v.consequences, tc.conseq) {
					t.Fatalf("judge(%v) = %+v, want cause rank %d, consequences %v", outs, v, tc.cause, tc.conseq)
				}
				if tc.lines != nil && !slices.Equal(v.lines(1), tc.lines) {
					t.Errorf("lines %q, want %q", v.lines(1), tc.lines)
				}
			}
		})
	}
	if _, ok := judge(nil, evidence{}); ok {
		t.Error("judge of no failure gave a verdict")
	}
}

func ptr(i int) *int { return &i }

func permutations(s []outcome) [][]outcome {
	if len(s) <= 1 {
		return [][]outcome{slices.Clone(s)}
	}
	var all [][]outcome
	for i := range s {
		rest := append(slices.Clone(s[:i]), s[i+1:]...)
		for _, p := range permutations(rest) {
			all = append(all, append([]outcome{s[i]}, p...))
		}
	}
	return all
}

// noPID is above every kernel's pid_max.
const noPID = 1 << 30

// TestJudgeWindow: the supervisor waits CauseGrace after the first failure
// (or until every rank has ended), then writes the cause first and the
// consequences second, and aborts the bootstrap with the cause's words
// alone (an exit status is not "peer lost").
func TestJudgeWindow(t *testing.T) {
	var stderr bytes.Buffer
	bs := &nopBootstrap{}
	ranks := make([]*rankProc, 3)
	for i := range ranks {
		// No such process group: the teardown's signals reach nobody.
		ranks[i] = &rankProc{p: Placement{Rank: i, Host: "h"}, pid: noPID + i}
	}
	s := &supervisor{job: Job{Output: Output{Stderr: &stderr}, Deadlines: Deadlines{KillGrace: time.Hour, CauseGrace: time.Hour}, Logger: hclog.NewNullLogger()}, srv: bs,
		ranks: ranks, exited: make([]bool, 3), alive: 3, exits: make(chan rankExit, 3)}
	// Rank 0 is reported first, though the kernel saw rank 2 end first
	// (order is the arrival on the exits channel: the reaper's order).
	exit := func(rank, code int) {
		s.exited[rank] = true
		s.alive--
		s.onExit(rankExit{rank: rank, remote: true, pid: noPID + rank, code: code})
	}
	exit(2, 3)
	exit(0, 3)
	if s.cause != nil || s.pendingC == nil {
		t.Fatalf("judged before the window closed (cause %v)", s.cause)
	}
	s.judge()
	want := "flexrun: rank 2 (host h, pid 1073741826) exited with status 3; terminating 1 other rank\nflexrun: rank 0 stopped: peer rank 2 lost\n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	var je *JobError
	if !errors.As(s.cause, &je) || je.Rank != 2 || s.code != 3 || !errors.Is(s.cause, errs.ErrPeerLost) {
		t.Errorf("cause %v (code %d)", s.cause, s.code)
	}
	if bs.aborted == nil || strings.Contains(bs.aborted.Error(), "peer lost") || bs.aborted.Error() != "rank 2 (host h, pid 1073741826) exited with status 3" {
		t.Errorf("bootstrap aborted with %q", bs.aborted)
	}
}

// TestStopSignal: a stopped child is found stopped, with its signal, and
// stays reportable; a running one is not.
func TestStopSignal(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if sig, ok := stopSignal(cmd.Process.Pid); ok {
		t.Fatalf("running child found stopped by %v", sig)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Wait (blocking, leaving the stop reportable) until it has stopped.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if sig, ok := stopSignal(cmd.Process.Pid); !ok || sig != syscall.SIGSTOP || stoppedHow(sig) != "was stopped by signal 19 (SIGSTOP)" {
		t.Errorf("stopSignal = %v, %v (%q)", sig, ok, stoppedHow(sig))
	}
	if _, ok := stopSignal(cmd.Process.Pid); !ok {
		t.Error("the stop was consumed by the first look")
	}
}
