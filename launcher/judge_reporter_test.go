package launcher

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/comm/join"
)

// TestReporterIsNoJoin: a process that joins the job's store only to
// publish why its communicators ended (flexlink's libnccl in a PyTorch
// rank, join.DialReporter) is heard through those ends alone: its join,
// goodbye, loss or refusal is not evidence of how the program used the
// store. Anyone else's report is.
func TestReporterIsNoJoin(t *testing.T) {
	reporter := join.ReporterHost("h1")
	for _, tc := range []struct {
		name string
		r    BootstrapReport
		want bool
	}{
		{"reporter joined", BootstrapReport{Kind: ReportJoined, Rank: 1, Host: reporter}, false},
		{"reporter left", BootstrapReport{Kind: ReportLeft, Rank: 1, Host: reporter}, false},
		{"reporter lost", BootstrapReport{Kind: ReportLost, Rank: 1, Host: reporter, Text: "connection closed before goodbye"}, false},
		{"reporter refused", BootstrapReport{Kind: ReportRefused, Rank: 1, Host: reporter, Text: "rank 1 already joined"}, false},
		{"reporter's end", BootstrapReport{Kind: ReportEnd, Rank: 1, Host: reporter, End: &CommEnd{Comm: "nccl@h0:1/w", Kind: "timeout", ClosedBy: -1}}, true},
		{"rank joined", BootstrapReport{Kind: ReportJoined, Rank: 1, Host: "h1"}, true},
		{"rank lost", BootstrapReport{Kind: ReportLost, Rank: 1, Host: "h1"}, true},
		{"rank left", BootstrapReport{Kind: ReportLeft, Rank: 1, Host: "h1"}, true},
		{"rank's end", BootstrapReport{Kind: ReportEnd, Rank: 1, Host: "h1", End: &CommEnd{Comm: "w", Kind: "timeout", ClosedBy: -1}}, true},
		{"host named like a reporter's, not one", BootstrapReport{Kind: ReportJoined, Rank: 1, Host: "h1-libnccl-report@x"}, true},
	} {
		if got := isEvidence(tc.r); got != tc.want {
			t.Errorf("%s: isEvidence = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestReporterJudgeWindow: an NCCL program's job as flexrun judges it.
// Rank 3, in no communicator with the others, finishes and exits 0; then
// ranks 0 and 2 time out in AllReduce #5 of a communicator of ranks 0-2,
// report it as reporters (joined, the end, goodbye) and exit 1, while
// rank 1, which withheld the call, runs on. The reporters' joins are no
// joins of the job's store, so rank 3's clean exit is not "before
// joining the job" (it would be taken for the cause), and the verdict
// names rank 1.
func TestReporterJudgeWindow(t *testing.T) {
	var stderr bytes.Buffer
	ranks := make([]*rankProc, 4)
	for i := range ranks {
		// No such process group: the teardown's signals reach nobody.
		ranks[i] = &rankProc{p: Placement{Rank: i, Host: "h"}, pid: noPID + i}
	}
	s := &supervisor{job: Job{Output: Output{Stderr: &stderr}, Deadlines: Deadlines{KillGrace: time.Hour, CauseGrace: time.Hour}, Logger: hclog.NewNullLogger()},
		srv: &nopBootstrap{}, ranks: ranks, exited: make([]bool, 4), alive: 4, exits: make(chan rankExit, 4)}
	s.reports = newReportLedger()
	exit := func(rank, code int) {
		s.exited[rank] = true
		s.alive--
		s.onExit(rankExit{rank: rank, remote: true, pid: noPID + rank, code: code})
	}
	exit(3, 0)
	reporter := join.ReporterHost("h")
	for _, r := range []int{0, 2} {
		s.reports.add(BootstrapReport{Kind: ReportJoined, Rank: r, Host: reporter})
		s.reports.add(BootstrapReport{Kind: ReportEnd, Rank: r, End: &CommEnd{Comm: "nccl@h:1/w", Kind: "timeout", ClosedBy: -1,
			InCall: "AllReduce #5", Members: []int{0, 1, 2}, Dup: r == 2,
			Text: "rank " + strconv.Itoa(r) + " of 3: AllReduce #5 did not complete: rank 1 has not called AllReduce #5"}})
		s.reports.add(BootstrapReport{Kind: ReportLeft, Rank: r, Host: reporter})
		s.drainReports()
		if s.cause != nil || len(s.failed) > 0 {
			t.Fatalf("a reporter's join failed the job: cause %v, failed %+v", s.cause, s.failed)
		}
	}
	exit(0, 1)
	exit(2, 1)
	s.judge()
	want := "flexrun: rank 1 (host h, pid 1073741825) did not take part in AllReduce #5 on communicator nccl@h:1/w: ranks 0, 2 timed out waiting for it\n" +
		"flexrun: ranks 0, 2 stopped: timed out waiting for rank 1\n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if s.code != 1 {
		t.Errorf("exit status %d, want 1 (the waiting ranks')", s.code)
	}
}
