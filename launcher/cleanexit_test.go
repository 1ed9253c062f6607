package launcher

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/comm/join"
)

// cleanExitJob is a supervisor of n ranks that exist only as numbers
// (their ends are fed by hand, as the agents of other hosts report
// them), whose verdict goes to stderr.
func cleanExitJob(n int, stderr *bytes.Buffer) (*supervisor, func(rank, code int)) {
	ranks := make([]*rankProc, n)
	for i := range ranks {
		// No such process group: the teardown's signals reach nobody.
		ranks[i] = &rankProc{p: Placement{Rank: i, Host: "h"}, pid: noPID + i}
	}
	s := &supervisor{job: Job{Output: Output{Stderr: stderr}, Deadlines: Deadlines{KillGrace: time.Hour, CauseGrace: time.Hour}, Logger: hclog.NewNullLogger()},
		srv: &nopBootstrap{}, ranks: ranks, exited: make([]bool, n), alive: n, exits: make(chan rankExit, n)}
	s.reports = newReportLedger()
	exit := func(rank, code int) {
		s.exited[rank] = true
		s.alive--
		s.onExit(rankExit{rank: rank, remote: true, pid: noPID + rank, code: code})
	}
	return s, exit
}

// TestCleanExitJudged: a rank that exits with status 0 and still caused
// the failure is named first, whatever order the ends are seen in.
//
//   - A flexlink rank exits 0 without closing the job (the server found
//     its connection ended before its goodbye); its peers' exits with
//     ExitPeerLost are seen first. (Such a clean end was taken for a
//     peer-lost one, and the first peer seen named.)
//   - Issue 30's PyTorch case: rank 1 withholds AllReduce #3, the others'
//     stall reports name it behind, it exits 0, and they report its loss
//     in that call and exit 1. Their later reports add to the stalls.
//   - The same with rank 1 still running when the others have ended,
//     their reports saying it ended the communicator: the verdict waits
//     for its exit (cleanPending), then names it.
func TestCleanExitJudged(t *testing.T) {
	const pid1 = "pid 1073741825"
	t.Run("exit 0 without closing, seen after its peers", func(t *testing.T) {
		var stderr bytes.Buffer
		s, exit := cleanExitJob(3, &stderr)
		for r := range 3 {
			s.reports.add(BootstrapReport{Kind: ReportJoined, Rank: r, Host: "h"})
		}
		s.drainReports()
		exit(0, ExitPeerLost)
		exit(2, ExitPeerLost)
		exit(1, 0)
		for _, r := range []int{1, 0, 2} {
			s.reports.add(BootstrapReport{Kind: ReportLost, Rank: r, Host: "h", Text: "connection closed before goodbye"})
		}
		s.judge()
		want := "flexrun: rank 1 (host h, " + pid1 + ") exited with status 0 without closing the job (its bootstrap connection ended before its goodbye)\n" +
			"flexrun: ranks 0, 2 stopped: peer rank 1 lost\n"
		if stderr.String() != want || s.code != 1 {
			t.Errorf("stderr %q, status %d; want %q, 1", stderr.String(), s.code, want)
		}
	})
	members := []int{0, 1, 2, 3}
	stall := func(r int) *CommEnd {
		return &CommEnd{Comm: "nccl@h:1/w", Kind: "timeout", ClosedBy: -1, InCall: "AllReduce #3", Members: members, Behind: []int{1},
			Text: "rank " + strconv.Itoa(r) + " of 4: AllReduce #3 has waited 5s: rank 1 has not called AllReduce #3"}
	}
	lost := func(r int) *CommEnd {
		return &CommEnd{Comm: "nccl@h:1/w", Kind: "peer-lost", ClosedBy: -1, InCall: "AllReduce #3", Members: members,
			Text: "ncclAllReduce rank " + strconv.Itoa(r) + " of 4: communicator w.s0c1 ended by rank 1 of 4 (world rank 1) on h: ncclCommAbort: aborted (local error: shm link to rank 0 (host h, pid 7): control socket closed: peer lost)"}
	}
	report := func(s *supervisor, r int, e *CommEnd) {
		reporter := join.ReporterHost("h")
		s.reports.add(BootstrapReport{Kind: ReportJoined, Rank: r, Host: reporter})
		s.reports.add(BootstrapReport{Kind: ReportEnd, Rank: r, End: e})
		s.reports.add(BootstrapReport{Kind: ReportLeft, Rank: r, Host: reporter})
		s.drainReports()
	}
	t.Run("withheld, then exit 0", func(t *testing.T) {
		var stderr bytes.Buffer
		s, exit := cleanExitJob(4, &stderr)
		for _, r := range []int{0, 2, 3} {
			report(s, r, stall(r))
		}
		exit(1, 0)
		for _, r := range []int{3, 0, 2} {
			report(s, r, lost(r))
			exit(r, 1)
		}
		s.judge()
		want := "flexrun: rank 1 (host h, " + pid1 + ") exited with status 0 while ranks 0, 2, 3 were in AllReduce #3 on communicator nccl@h:1/w (it had not called it)\n" +
			"flexrun: ranks 0, 2, 3 stopped: peer rank 1 lost\n"
		if stderr.String() != want || s.code != 1 {
			t.Errorf("stderr %q, status %d; want %q, 1", stderr.String(), s.code, want)
		}
	})
	t.Run("ended the communicator, exits 0 after the others", func(t *testing.T) {
		var stderr bytes.Buffer
		s, exit := cleanExitJob(4, &stderr)
		for _, r := range []int{3, 0, 2} {
			report(s, r, lost(r))
			exit(r, 1)
		}
		if !s.cleanPending() {
			t.Fatal("the verdict does not wait for rank 1, which the others say ended their communicator and is still running")
		}
		exit(1, 0)
		if s.cleanPending() {
			t.Fatal("the verdict still waits once rank 1 has exited")
		}
		s.judge()
		want := "flexrun: rank 1 (host h, " + pid1 + ") exited with status 0 while ranks 0, 2, 3 were in AllReduce #3 on communicator nccl@h:1/w\n" +
			"flexrun: ranks 0, 2, 3 stopped: peer rank 1 lost\n"
		if stderr.String() != want || s.code != 1 {
			t.Errorf("stderr %q, status %d; want %q, 1", stderr.String(), s.code, want)
		}
	})
}
