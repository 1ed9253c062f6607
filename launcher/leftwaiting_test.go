package launcher

import (
	"slices"
	"testing"
)

// TestLostRank: the member a lost-peer or abort report names, from the
// first words that name one (internal/comm's forms), placed as a job rank
// only where the report's members agree with the world rank the words
// give.
func TestLostRank(t *testing.T) {
	four := []int{0, 1, 2, 3}
	for _, tc := range []struct {
		name    string
		kind    string
		text    string
		members []int
		want    int // -1: none
	}{
		{"ended by", "peer-lost", "ncclAllReduce rank 3 of 4: communicator w ended by rank 1 of 4 (world rank 1) on vm: ncclCommAbort: aborted", four, 1},
		{"an abort's words", "aborted", "communicator w ended by rank 2 of 4 (world rank 2) on vm: ncclCommAbort: aborted", four, 2},
		{"member lost, the local error naming another", "peer-lost",
			"ncclAllReduce rank 2 of 4: communicator w: member rank 1 (world rank 1) on host vm was lost: bootstrap: rank 1 on host vm lost (local error: shm link to rank 0 (host vm, pid 7): peer closed the link: peer lost)", four, 1},
		{"the first words that name one", "peer-lost",
			"communicator w ended by rank 3 of 4 (world rank 3) on vm: x (local error: communicator w: member rank 1 (world rank 1) on host vm was lost)", four, 3},
		{"a sub-communicator's members, as the words place them", "peer-lost", "communicator w.0 ended by rank 1 of 3 (world rank 2) on vm: aborted", []int{0, 2, 3}, 2},
		{"the words name another communicator's rank: not placed", "peer-lost", "communicator w ended by rank 1 of 4 (world rank 1) on vm: aborted", []int{0, 2, 3}, -1},
		{"no members: the world rank", "peer-lost", "communicator w ended by rank 0 of 2 (world rank 5) on vm: aborted", nil, 5},
		{"a link's words name no origin", "peer-lost", "rank 0: recv from rank 1: shm link to rank 1 (host vm, pid 7): control socket closed: peer lost", four, -1},
		{"a timeout names it by Behind, not by words", "timeout", "communicator w ended by rank 1 of 4 (world rank 1) on vm", four, -1},
	} {
		got, ok := lostRank(endReport{rank: 0, CommEnd: CommEnd{Comm: "c", Kind: tc.kind, Text: tc.text, Members: tc.members, ClosedBy: -1}})
		if !ok {
			got = -1
		}
		if got != tc.want {
			t.Errorf("%s: lostRank = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestSupersede: a member's later report on a communicator replaces its
// earlier timeouts there, except a lost peer or an abort in the very call
// it reported waiting in, which adds to that report (the member it found
// behind is most often the one that left).
func TestSupersede(t *testing.T) {
	stall := CommEnd{Comm: "w", Kind: "timeout", InCall: "AllReduce #3", Behind: []int{1}, ClosedBy: -1}
	for _, tc := range []struct {
		name  string
		later CommEnd
		kept  bool // the stall is still evidence
	}{
		{"a lost peer in the same call", CommEnd{Comm: "w", Kind: "peer-lost", InCall: "AllReduce #3", ClosedBy: -1}, true},
		{"an abort in the same call", CommEnd{Comm: "w", Kind: "aborted", InCall: "AllReduce #3", ClosedBy: -1}, true},
		{"a lost peer in a later call", CommEnd{Comm: "w", Kind: "peer-lost", InCall: "AllReduce #4", ClosedBy: -1}, false},
		{"a lost peer in no call said", CommEnd{Comm: "w", Kind: "peer-lost", ClosedBy: -1}, false},
		{"resumed", CommEnd{Comm: "w", Kind: EndResumed, InCall: "AllReduce #3", ClosedBy: -1}, false},
		{"a mismatch in the same call", CommEnd{Comm: "w", Kind: "mismatch", InCall: "AllReduce #3", ClosedBy: -1}, false},
		{"its timeout at last", CommEnd{Comm: "w", Kind: "timeout", InCall: "AllReduce #3", Behind: []int{1}, ClosedBy: -1}, false},
		{"another communicator", CommEnd{Comm: "w.0", Kind: "mismatch", InCall: "AllReduce #3", ClosedBy: -1}, true},
	} {
		var ev evidence
		ev.add(BootstrapReport{Kind: ReportEnd, Rank: 0, End: &stall})
		ev.add(BootstrapReport{Kind: ReportEnd, Rank: 2, End: &stall}) // another member's is never touched
		ev.add(BootstrapReport{Kind: ReportEnd, Rank: 0, End: &tc.later})
		kept := slices.ContainsFunc(ev.ends, func(e endReport) bool {
			return e.rank == 0 && e.Kind == "timeout" && e.InCall == stall.InCall && slices.Equal(e.Behind, stall.Behind)
		})
		if tc.later.Kind == "timeout" {
			kept = len(slices.DeleteFunc(slices.Clone(ev.ends), func(e endReport) bool { return e.rank != 0 })) > 1
		}
		if kept != tc.kept {
			t.Errorf("%s: the earlier stall kept = %v, want %v", tc.name, kept, tc.kept)
		}
		if !slices.ContainsFunc(ev.ends, func(e endReport) bool { return e.rank == 2 }) {
			t.Errorf("%s: rank 2's report was dropped", tc.name)
		}
	}
}
