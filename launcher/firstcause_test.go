package launcher

import (
	"slices"
	"strconv"
	"testing"
)

// TestFirstCause: what the ranks and the server reported names the cause
// before the order of the ends does (a refused rank, a mismatch a member
// published, a member that closed early, ranks that never joined, a rank
// that ended before joining), whatever order the ends arrive in; a lost
// host and a stopped rank still go first; a healthy rank is never the
// cause.
func TestFirstCause(t *testing.T) {
	who := []outcome{{rank: 0, host: "h", pid: 100}, {rank: 1, host: "h", pid: 101}, {rank: 2, host: "h", pid: 102}}
	failed := func(rank, order, code int) outcome {
		o := who[rank]
		o.kind, o.code, o.order, o.how = endStatus, code, order, "exited with status "+strconv.Itoa(code)
		if code == ExitPeerLost {
			o.kind = endPeerLost
		}
		return o
	}
	beforeJoin := func(o outcome) outcome { o.beforeJoin = true; o.how += " before joining the job"; return o }
	mismatch := func(rank int, text string) endReport {
		return endReport{rank: rank, CommEnd: CommEnd{Comm: "w", Kind: "mismatch", Text: text, ClosedBy: -1}}
	}
	echoed := func(rank int, text string) endReport { e := mismatch(rank, text); e.Echo = true; return e }
	closed := func(rank int) endReport {
		return endReport{rank: rank, CommEnd: CommEnd{Comm: "w", Kind: "mismatch", Text: "...", ClosedBy: 1, ClosedCalls: 5, InCall: "allreduce #6"}}
	}
	timedOut := func(rank int, echo bool) endReport {
		return endReport{rank: rank, CommEnd: CommEnd{Comm: "w", Kind: "timeout", Text: "...", ClosedBy: -1, InCall: "allreduce #6", Members: []int{0, 1, 2}, Echo: echo}}
	}
	behindOf := func(e endReport, rs ...int) endReport { e.Behind = rs; return e }
	sub := func(e endReport) endReport { e.Comm, e.Members = "w.0", []int{0, 2}; return e }
	reported := func(rs ...BootstrapReport) evidence {
		var ev evidence
		for _, r := range rs {
			ev.add(r)
		}
		return ev
	}
	timedOutIn := func(rank int, call string) endReport { e := timedOut(rank, false); e.InCall = call; return e }
	endOf := func(rank int, e endReport) BootstrapReport {
		return BootstrapReport{Kind: ReportEnd, Rank: rank, End: &e.CommEnd}
	}
	running := func(rs ...int) []outcome {
		var os []outcome
		for _, r := range rs {
			os = append(os, who[r])
		}
		return os
	}
	// lostIn: rank's call failed on the end of communicator w by rank
	// by (its words name it, as internal/comm's do).
	lostIn := func(rank, by int) endReport {
		return endReport{rank: rank, CommEnd: CommEnd{Comm: "w", Kind: "peer-lost", ClosedBy: -1, InCall: "allreduce #6", Members: []int{0, 1, 2},
			Text: "ncclAllReduce rank " + strconv.Itoa(rank) + " of 3: communicator w.s0c1 ended by rank " + strconv.Itoa(by) + " of 3 (world rank " + strconv.Itoa(by) + ") on h: ncclCommAbort: aborted (local error: shm link to rank 0: peer lost)"}}
	}
	cleanExit := func(rank, order int) outcome {
		o := who[rank]
		o.kind, o.order, o.how = endStatus, order, "exited with status 0"
		return o
	}
	withClean := func(e evidence, cs ...outcome) evidence { e.clean, e.who = cs, who; return e }
	both := "rank 0 on h: communicator w (rank 0 of 3): allreduce: collective mismatch: rank 0 called allreduce count=1, rank 1 called allgather count=1 (differs: collective; seen by rank 0)"
	sizeOnly := "rank 2: recv from rank 1: message 13 has 16 bytes, its buffer 8: collective mismatch"
	tests := []struct {
		name  string
		outs  []outcome
		ev    evidence
		code  int
		lines []string
	}{
		{"two calls: the words that name both, not a healthy first failure",
			[]outcome{failed(2, 1, 3), failed(0, 2, 3), failed(1, 3, 3)},
			evidence{ends: []endReport{mismatch(2, sizeOnly), mismatch(0, both)}}, 3,
			[]string{"collective mismatch on communicator w: rank 0 called allreduce count=1, rank 1 called allgather count=1 (differs: collective; seen by rank 0); terminating 1 other rank",
				"ranks 0, 1, 2 stopped: collective mismatch"}},
		{"two calls: the status of the first rank that failed on its own, not of a consequence that ended first (it lost the mismatched rank's process)",
			[]outcome{failed(0, 3, 3), failed(1, 2, 3), failed(2, 1, ExitPeerLost)},
			evidence{ends: []endReport{mismatch(0, both)}}, 3,
			[]string{"collective mismatch on communicator w: rank 0 called allreduce count=1, rank 1 called allgather count=1 (differs: collective; seen by rank 0); terminating 1 other rank",
				"ranks 0, 1, 2 stopped: collective mismatch"}},
		{"both calls only in an echo's local error: those words",
			[]outcome{failed(0, 1, 3), failed(1, 2, 3)},
			evidence{ends: []endReport{mismatch(0, sizeOnly), echoed(1, sizeOnly+" (local error: rank 1: allreduce count=2: collective mismatch: rank 0 called allreduce count=1, rank 1 called allreduce count=2 (differs: count; seen by rank 1))")}}, 3,
			[]string{"collective mismatch on communicator w: rank 0 called allreduce count=1, rank 1 called allreduce count=2 (differs: count; seen by rank 1); terminating 1 other rank",
				"ranks 0, 1 stopped: collective mismatch"}},
		{"only a link's words: still the mismatch",
			[]outcome{failed(2, 1, 3)}, evidence{ends: []endReport{mismatch(2, sizeOnly)}}, 3,
			[]string{"collective mismatch on communicator w: " + sizeOnly + "; terminating 1 other rank", "rank 2 stopped: collective mismatch"}},
		{"closed early: the closer, who exited 0, with every member that saw it",
			[]outcome{failed(0, 1, 3), failed(2, 2, 3)},
			evidence{ends: []endReport{closed(2), closed(0)}, who: who}, 3,
			[]string{"rank 1 (host h, pid 101) closed communicator w after 5 collectives while ranks 0, 2 were in allreduce #6 (collective mismatch); terminating 1 other rank",
				"ranks 0, 2 stopped: collective mismatch"}},
		{"refused at the handshake, over an earlier failure",
			[]outcome{failed(0, 1, ExitPeerLost), beforeJoin(failed(1, 2, 1))},
			evidence{refused: map[int]string{1: "rank 1 says the job has 4 ranks, the server 3"}, joined: map[int]bool{0: true, 2: true}}, 1,
			[]string{"rank 1 (host h, pid 101) exited with status 1 before joining the job: the bootstrap refused it: rank 1 says the job has 4 ranks, the server 3; terminating 1 other rank",
				"rank 0 stopped: peer rank 1 lost"}},
		{"never joined, once the bootstrap timeout passed",
			[]outcome{failed(0, 1, 1), failed(2, 2, 1)},
			evidence{neverJoined: []outcome{who[1]}, joinTimeout: "2s", joined: map[int]bool{0: true, 2: true}}, 1,
			[]string{"rank 1 (host h, pid 101) never joined the job within the bootstrap timeout (2s); terminating 1 other rank",
				"ranks 0, 2 stopped: waiting for rank 1 to join"}},
		{"ended before joining goes before a status seen first",
			[]outcome{failed(0, 1, 3), beforeJoin(failed(1, 2, 1))}, evidence{joined: map[int]bool{0: true}}, 1,
			[]string{"rank 1 (host h, pid 101) exited with status 1 before joining the job; terminating 1 other rank", "rank 0 stopped: peer rank 1 lost"}},
		{"withheld: the running member that said nothing, not the ranks that timed out",
			[]outcome{failed(2, 1, 3), failed(0, 2, 3)},
			evidence{ends: []endReport{timedOut(2, false), timedOut(0, true)}, running: []outcome{who[1]}, who: who}, 3,
			[]string{"rank 1 (host h, pid 101) did not take part in allreduce #6 on communicator w: ranks 0, 2 timed out waiting for it; terminating 1 other rank",
				"ranks 0, 2 stopped: timed out waiting for rank 1"}},
		{"withheld: a member that said it waited and is still running (the store's server holds its error) stopped too",
			[]outcome{failed(2, 1, 3)},
			evidence{ends: []endReport{timedOut(2, false), timedOut(0, true)}, running: []outcome{who[0], who[1]}, who: who}, 3,
			[]string{"rank 1 (host h, pid 101) did not take part in allreduce #6 on communicator w: ranks 0, 2 timed out waiting for it; terminating 1 other rank",
				"ranks 0, 2 stopped: timed out waiting for rank 1"}},
		{"withheld: the ranks the waiters counted behind, not a healthy member whose report is late",
			[]outcome{failed(2, 1, 3)},
			evidence{ends: []endReport{behindOf(timedOut(2, false), 1)}, running: []outcome{who[0], who[1]}, who: who}, 3,
			[]string{"rank 1 (host h, pid 101) did not take part in allreduce #6 on communicator w: rank 2 timed out waiting for it; terminating 1 other rank",
				"rank 2 stopped: timed out waiting for rank 1"}},
		{"withheld: a running rank that is no member is not named",
			[]outcome{failed(2, 1, 3), failed(0, 2, 3)},
			evidence{ends: []endReport{sub(timedOut(2, false)), sub(timedOut(0, true))}, running: []outcome{who[1]}, who: who}, 3,
			[]string{"rank 2 (host h, pid 102) exited with status 3; terminating 1 other rank", "rank 0 stopped: peer rank 2 lost"}},
		{"a member that published a lost peer is a consequence, whatever its status",
			[]outcome{failed(0, 1, 1), failed(2, 2, 3)},
			reported(BootstrapReport{Kind: ReportEnd, Rank: 0, End: &CommEnd{Comm: "w", Kind: "peer-lost", ClosedBy: -1}}), 3,
			[]string{"rank 2 (host h, pid 102) exited with status 3; terminating 1 other rank", "rank 0 stopped: peer rank 2 lost"}},
		{"one process's reports: a stall it reported, then a later call it timed out in: the later call's withholder",
			[]outcome{failed(0, 1, 1)},
			reported(endOf(0, behindOf(timedOut(0, false), 1)), endOf(0, behindOf(timedOutIn(0, "allreduce #9"), 2))).with(running(1, 2)), 1,
			[]string{"rank 2 (host h, pid 102) did not take part in allreduce #9 on communicator w: rank 0 timed out waiting for it; terminating 1 other rank",
				"rank 0 stopped: timed out waiting for rank 2"}},
		{"one process's reports: a stall for a call that then completed is no cause",
			[]outcome{failed(0, 1, 1)},
			reported(endOf(0, behindOf(timedOut(0, false), 1)), endOf(0, endReport{CommEnd: CommEnd{Comm: "w", Kind: EndResumed, ClosedBy: -1, InCall: "allreduce #6"}})).with(running(1, 2)), 1,
			[]string{"rank 0 (host h, pid 100) exited with status 1; terminating 1 other rank"}},
		{"one process's reports: a stall, then a mismatch it met: the mismatch",
			[]outcome{failed(0, 1, 1)},
			reported(endOf(0, behindOf(timedOut(0, false), 1)), endOf(0, mismatch(0, both))).with(running(1, 2)), 1,
			[]string{"collective mismatch on communicator w: rank 0 called allreduce count=1, rank 1 called allgather count=1 (differs: collective; seen by rank 0); terminating 1 other rank",
				"rank 0 stopped: collective mismatch"}},
		{"one process's reports: a stall, then a lost peer: the lost peer",
			[]outcome{failed(0, 2, 1), {rank: 2, host: "h", pid: 102, kind: endSignal, code: 137, how: "was killed by signal 9 (SIGKILL)", order: 1}},
			reported(endOf(0, behindOf(timedOut(0, false), 1)), endOf(0, endReport{CommEnd: CommEnd{Comm: "w", Kind: "peer-lost", ClosedBy: -1, InCall: "allreduce #9"}})).with(running(1)), 137,
			[]string{"rank 2 (host h, pid 102) was killed by signal 9 (SIGKILL); terminating 1 other rank", "rank 0 stopped: peer rank 2 lost"}},
		{"exited 0 after withholding: the waiters' timeouts name it behind, then their loss of it in the same call",
			[]outcome{failed(2, 2, 1), failed(0, 3, 1)},
			withClean(reported(endOf(0, behindOf(timedOut(0, false), 1)), endOf(2, behindOf(timedOut(2, false), 1)), endOf(2, lostIn(2, 1)), endOf(0, lostIn(0, 1))), cleanExit(1, 1)), 1,
			[]string{"rank 1 (host h, pid 101) exited with status 0 while ranks 0, 2 were in allreduce #6 on communicator w (it had not called it); terminating 1 other rank",
				"ranks 0, 2 stopped: peer rank 1 lost"}},
		{"exited 0 after withholding: the waiters' timeouts alone",
			[]outcome{failed(2, 2, 1), failed(0, 3, 1)},
			withClean(reported(endOf(0, behindOf(timedOut(0, false), 1)), endOf(2, behindOf(timedOut(2, false), 1))), cleanExit(1, 1)), 1,
			[]string{"rank 1 (host h, pid 101) exited with status 0 while ranks 0, 2 were in allreduce #6 on communicator w (it had not called it); terminating 1 other rank",
				"ranks 0, 2 stopped: peer rank 1 lost"}},
		{"exited 0 in the middle of a call: the others' loss of it alone",
			[]outcome{failed(2, 2, 1), failed(0, 3, 1)},
			withClean(reported(endOf(2, lostIn(2, 1)), endOf(0, lostIn(0, 1))), cleanExit(1, 1)), 1,
			[]string{"rank 1 (host h, pid 101) exited with status 0 while ranks 0, 2 were in allreduce #6 on communicator w; terminating 1 other rank",
				"ranks 0, 2 stopped: peer rank 1 lost"}},
		{"ended the communicator under the others, still running",
			[]outcome{failed(2, 2, 1), failed(0, 3, 1)},
			withClean(reported(endOf(2, lostIn(2, 1)), endOf(0, lostIn(0, 1)))).with(running(1)), 1,
			[]string{"rank 1 (host h, pid 101) ended communicator w while ranks 0, 2 were in allreduce #6; terminating 1 other rank",
				"ranks 0, 2 stopped: peer rank 1 lost"}},
		{"ended the communicator while the others were in different calls (a slower member still finishing the one before): each named with its call",
			[]outcome{failed(2, 1, 1), failed(0, 2, 1)},
			withClean(reported(endOf(2, func() endReport { e := lostIn(2, 1); e.InCall = "allreduce #5"; return e }()), endOf(0, lostIn(0, 1))), cleanExit(1, 1)), 1,
			[]string{"rank 1 (host h, pid 101) exited with status 0 while rank 0 was in allreduce #6 and rank 2 in allreduce #5 on communicator w; terminating 1 other rank",
				"ranks 0, 2 stopped: peer rank 1 lost"}},
		{"a waiter that aborted at its timeout is not the cause: the rank it waited for",
			[]outcome{failed(0, 1, 1), failed(2, 2, 1)},
			withClean(reported(endOf(0, behindOf(timedOut(0, false), 1)), endOf(2, lostIn(2, 0)))).with(running(1)), 1,
			[]string{"rank 1 (host h, pid 101) did not take part in allreduce #6 on communicator w: ranks 0, 2 timed out waiting for it; terminating 1 other rank",
				"ranks 0, 2 stopped: timed out waiting for rank 1"}},
		{"a rank that exited 0 that no report names is no cause",
			[]outcome{failed(0, 2, 1), {rank: 2, host: "h", pid: 102, kind: endSignal, code: 137, how: "was killed by signal 9 (SIGKILL)", order: 1}},
			withClean(reported(endOf(0, endReport{CommEnd: CommEnd{Comm: "w", Kind: "peer-lost", ClosedBy: -1, InCall: "allreduce #6", Text: "link to rank 2: peer lost"}})), cleanExit(1, 3)), 137,
			[]string{"rank 2 (host h, pid 102) was killed by signal 9 (SIGKILL); terminating 1 other rank", "rank 0 stopped: peer rank 2 lost"}},
		{"the rank the others' reports name goes before one seen first that said nothing",
			[]outcome{failed(2, 1, 1), failed(1, 3, 3), failed(0, 2, 1)},
			reported(endOf(0, lostIn(0, 1))), 3,
			[]string{"rank 1 (host h, pid 101) exited with status 3; terminating 1 other rank", "ranks 0, 2 stopped: peer rank 1 lost"}},
		{"a stopped rank goes before a mismatch",
			[]outcome{failed(0, 1, 3), {rank: 2, host: "h", pid: 102, kind: endStopped, code: 147, how: "was stopped by signal 19 (SIGSTOP)", order: 2}},
			evidence{ends: []endReport{mismatch(0, both)}}, 147,
			[]string{"rank 2 (host h, pid 102) was stopped by signal 19 (SIGSTOP); terminating 1 other rank", "rank 0 stopped: peer rank 2 lost"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, outs := range permutations(tc.outs) {
				v, ok := judge(outs, tc.ev)
				if !ok || v.cause.code != tc.code || !slices.Equal(v.lines(1), tc.lines) {
					t.Fatalf("judge(%v):\n got code %d, lines %q\nwant code %d, lines %q", outs, v.cause.code, v.lines(1), tc.code, tc.lines)
				}
			}
		})
	}
}

// with sets the ranks still running when judged (and who the ranks are).
func (e evidence) with(running []outcome) evidence {
	e.running = running
	return e
}
