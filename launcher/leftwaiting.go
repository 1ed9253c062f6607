package launcher

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A rank that exits with status 0 has not failed, but it may still be a
// job's first cause: it left while the others were in a collective with
// it (it withheld the collective, then exited; or exited in the middle
// of it), and they failed waiting for it or on its loss. flexrun learns
// so only from the others' reports: a timeout report whose Behind names
// it (the members counted its calls), or a lost-peer report whose words
// say the communicator was "ended by" it.

// endedBy and memberLost match the words of a communicator's end that
// name the member it lost (internal/comm: "communicator w ended by rank
// 1 of 4 (world rank 1) on h0: ...", the member that ended it;
// "communicator w: member rank 1 (world rank 1) on host h0 was lost: ...",
// the member the bootstrap server found gone). The first number is the
// member's rank in the communicator the words name, the last its world
// rank.
var (
	endedBy    = regexp.MustCompile(`ended by rank (\d+) of \d+ \(world rank (\d+)\)`)
	memberLost = regexp.MustCompile(`member rank (\d+) \(world rank (\d+)\) on host \S+ was lost`)
)

// lostRank is the job rank whose end e says it met (a lost peer, an
// abort): the member the first words that name one give (the origin:
// later words, "(local error: ...)", are detail). The communicator the
// words name may be another than e's (libnccl's inner one): the world
// rank they give is taken only where e's Members (the job ranks of e's
// communicator, by its ranks) agree, or where e gives none (a flexlink
// rank's world is the job). ok is false when e names no rank, or one it
// cannot place for sure.
func lostRank(e endReport) (int, bool) {
	if e.Kind != "peer-lost" && e.Kind != "aborted" {
		return 0, false
	}
	at, r, w := -1, 0, 0
	for _, re := range []*regexp.Regexp{endedBy, memberLost} {
		if m := re.FindStringSubmatchIndex(e.Text); m != nil && (at < 0 || m[0] < at) {
			at = m[0]
			r, _ = strconv.Atoi(e.Text[m[2]:m[3]])
			w, _ = strconv.Atoi(e.Text[m[4]:m[5]])
		}
	}
	if at < 0 {
		return 0, false
	}
	if e.Members == nil || r < len(e.Members) && e.Members[r] == w {
		return w, true
	}
	return 0, false
}

// namesRank reports whether e, another member's report, says rank kept
// it waiting (Behind) or ended the communicator under it (lostRank);
// behind is true for the first.
func (ev *evidence) namesRank(e endReport, rank int) (named, behind bool) {
	if e.rank == rank || e.Members != nil && !slices.Contains(e.Members, rank) {
		return false, false
	}
	if e.Kind == "timeout" && slices.Contains(e.Behind, rank) {
		return true, true
	}
	if r, ok := lostRank(e); ok && r == rank && !ev.waited(rank) {
		return true, false
	}
	return false, false
}

// leftWaiting names a rank that exited with status 0 while the ranks that
// failed were in a collective with it: their reports name it (behind in
// the call, or the member whose end they met) and every rank that failed
// failed on that communicator (it reported an end there, or a lost
// peer). It is the cause; the ranks that failed are consequences: "rank 1
// (host h, pid 7) exited with status 0 while ranks 0, 2, 3 were in
// AllReduce #3 on communicator c (it had not called it)".
//
// A rank still running that the failed ranks' reports say ended the
// communicator under them (its process is on its way out: torch aborts a
// process's communicators as it exits) is named the same way, by what it
// did: "rank 1 (...) ended communicator c while ...".
func leftWaiting(outs []outcome, ev evidence, firstFailed outcome) (verdict, bool) {
	candidates := slices.Clone(ev.clean)
	if r, ok := ev.reportedLost(); ok {
		for _, o := range ev.running {
			if o.rank == r {
				candidates = append(candidates, o)
			}
		}
	}
	for _, c := range candidates {
		stillRunning := slices.ContainsFunc(ev.running, func(o outcome) bool { return o.rank == c.rank })
		var first *endReport
		for i, e := range ev.ends {
			if named, behind := ev.namesRank(e, c.rank); named && !e.Echo && !(stillRunning && behind) {
				first = &ev.ends[i]
				break
			}
		}
		if first == nil {
			continue
		}
		// It had not called it: a member waiting in that call found so.
		behind := slices.ContainsFunc(ev.ends, func(e endReport) bool {
			_, b := ev.namesRank(e, c.rank)
			return b && e.Comm == first.Comm && e.InCall == first.InCall
		})
		// Every failed rank is a consequence of c's leaving: it ended on
		// that communicator (any word but a mismatch, which names its own
		// cause), or on a lost peer.
		onComm := func(r int) bool {
			return slices.ContainsFunc(ev.ends, func(e endReport) bool {
				return e.rank == r && e.Comm == first.Comm && e.Kind != "mismatch"
			})
		}
		consistent := true
		for _, o := range outs {
			if o.rank != c.rank && !onComm(o.rank) && o.kind != endPeerLost && !ev.reporters[o.rank] {
				consistent = false
			}
		}
		if !consistent {
			continue
		}
		v := verdict{cause: c, why: fmt.Sprintf("peer rank %d lost", c.rank)}
		v.cause.code = max(firstFailed.code, 1)
		were := whereWere(ev.ends, first, c.rank)
		did := c.how + " while " + were + " on communicator " + first.Comm
		if stillRunning {
			did = "ended communicator " + first.Comm + " while " + were
		}
		v.first = fmt.Sprintf("rank %d (host %s, pid %d) %s", c.rank, c.host, c.pid, did)
		if behind {
			v.first += " (it had not called it)"
		}
		v.consequences = others(outs, func(r int) bool { return r == c.rank })
		return v, true
	}
	return verdict{}, false
}

// reportedLost is the rank the failed ranks' own reports say they lost
// (lostRank of the first of their reports that names one), when no
// report names another; ok is false when none names one, or they
// disagree. A rank that itself reported waiting in a call, or losing a
// peer, is not taken: it was a waiter that gave up (torch's watchdog
// aborts a waiting rank's communicator at its timeout, and the others
// then meet an end "by" it).
func (ev *evidence) reportedLost() (rank int, ok bool) {
	for _, e := range ev.ends {
		r, named := lostRank(e)
		if !named || r == e.rank || ev.waited(r) {
			continue
		}
		if ok && r != rank {
			return 0, false
		}
		rank, ok = r, true
	}
	return rank, ok
}

// waited reports whether rank reported that it waited in a call (a
// timeout) or lost a peer: a consequence, not an origin.
func (ev *evidence) waited(rank int) bool {
	return ev.reporters[rank] || slices.ContainsFunc(ev.ends, func(e endReport) bool {
		return e.rank == rank && e.Kind == "timeout"
	})
}

// whereWere says which collective each member that reported an end on
// first's communicator was in (left is the rank that left), grouped by
// call in the order of each group's lowest rank: "ranks 0, 2 were in
// AllReduce #5", or, where a member was still finishing the call before
// (a slower member meets the end there), "rank 0 was in AllReduce #5 and
// rank 2 in AllReduce #4".
func whereWere(ends []endReport, first *endReport, left int) string {
	var calls []string
	in := map[string][]int{}
	seen := map[int]bool{}
	for _, e := range ends {
		// (A member that says no call was in none, unless first says none
		// either.)
		if e.Comm != first.Comm || e.rank == left || seen[e.rank] || e.Kind == "mismatch" || e.Kind == EndResumed ||
			e.InCall == "" && first.InCall != "" {
			continue
		}
		call := e.InCall
		seen[e.rank] = true
		if _, ok := in[call]; !ok {
			calls = append(calls, call)
		}
		in[call] = append(in[call], e.rank)
	}
	for _, call := range calls {
		slices.Sort(in[call])
	}
	slices.SortFunc(calls, func(a, b string) int { return in[a][0] - in[b][0] })
	var b strings.Builder
	for i, call := range calls {
		rs := in[call]
		name := call
		if name == "" {
			name = "a collective"
		}
		switch {
		case i > 0 && len(rs) > 1:
			fmt.Fprintf(&b, " and ranks %s in %s", joinInts(rs), name)
		case i > 0:
			fmt.Fprintf(&b, " and rank %s in %s", joinInts(rs), name)
		case len(rs) > 1:
			fmt.Fprintf(&b, "ranks %s were in %s", joinInts(rs), name)
		default:
			fmt.Fprintf(&b, "rank %s was in %s", joinInts(rs), name)
		}
	}
	return b.String()
}
