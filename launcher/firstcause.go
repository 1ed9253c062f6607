package launcher

import (
	"fmt"
	"slices"
)

// firstCause names a cause from what the ranks and the bootstrap server
// reported, before the order of the ends is looked at (see judge):
//
//  1. a rank refused at the handshake (a wrong world size, job or
//     secret): nothing the others did made it so;
//  2. a collective mismatch a rank published (the first one): a member
//     that closed a communicator while the others were in a later
//     collective on it, or two ranks that called different collectives;
//     the ranks it names are the cause, every rank that failed on it a
//     consequence;
//  3. a rank that exited with status 0 while the ranks that failed were
//     in a collective with it, as their reports name it (leftWaiting);
//  4. ranks still running that did not take part in a collective that
//     every failed rank timed out in (FLEXLINK_TIMEOUT, the caller's
//     deadline, a torch group timeout): they withheld it;
//  5. ranks still running that never joined, once the bootstrap timeout
//     has passed: the others failed waiting for them.
//
// A lost host and a stopped rank still go first: either makes the others
// fail in ways that look like these. ok is false when none applies.
func firstCause(outs []outcome, ev evidence) (verdict, bool) {
	if slices.ContainsFunc(outs, func(o outcome) bool { return o.kind == endHost || o.kind == endStopped }) {
		return verdict{}, false
	}
	firstFailed := firstOwnFailure(outs, ev)
	for _, o := range outs {
		// (A refusal is unauthenticated: it counts only for a rank that
		// never joined.)
		if why, ok := ev.refused[o.rank]; ok && !ev.joined[o.rank] {
			o.how += ": the bootstrap refused it: " + why
			return verdict{cause: o, consequences: others(outs, func(r int) bool { return r == o.rank })}, true
		}
	}
	if m, ok := ev.mismatch(); ok {
		return mismatchVerdict(m, outs, ev, firstFailed), true
	}
	if v, ok := leftWaiting(outs, ev, firstFailed); ok {
		return v, true
	}
	if v, ok := withheld(outs, ev, firstFailed); ok {
		return v, true
	}
	if len(ev.neverJoined) > 0 && ev.joinTimeout != "" {
		nj := ev.neverJoined
		v := verdict{cause: nj[0], noRank: len(nj) > 1}
		v.cause.code = max(firstFailed.code, 1)
		var rs []int
		for _, o := range nj {
			rs = append(rs, o.rank)
		}
		if len(nj) == 1 {
			v.first = fmt.Sprintf("rank %d (host %s, pid %d) never joined the job within the bootstrap timeout (%s)", nj[0].rank, nj[0].host, nj[0].pid, ev.joinTimeout)
			v.why = fmt.Sprintf("waiting for rank %d to join", nj[0].rank)
		} else {
			v.first = fmt.Sprintf("ranks %s never joined the job within the bootstrap timeout (%s)", joinInts(rs), ev.joinTimeout)
			v.why = fmt.Sprintf("waiting for ranks %s to join", joinInts(rs))
		}
		v.consequences = others(outs, func(r int) bool { return slices.Contains(rs, r) })
		return v, true
	}
	return verdict{}, false
}

// firstOwnFailure is the first rank to end among those that did not
// fail only because they lost a peer (ExitPeerLost, or a lost peer they
// reported), or the first of all when every one did: the failure whose
// exit status flexrun gives for a cause that is no one rank's exit (a
// two-sided mismatch, a withheld call). A rank that failed on the loss of
// the cause's process can end before it (the kernel closes a dying
// process's sockets before its parent hears of its end), and its status
// (75) is not the job's.
func firstOwnFailure(outs []outcome, ev evidence) outcome {
	var first, own *outcome
	for i, o := range outs {
		if first == nil || o.order < first.order {
			first = &outs[i]
		}
		if o.kind != endPeerLost && !ev.reporters[o.rank] && (own == nil || o.order < own.order) {
			own = &outs[i]
		}
	}
	if own != nil {
		return *own
	}
	return *first
}

// mismatchVerdict is the verdict of the first mismatch a member
// published (m).
func mismatchVerdict(m endReport, outs []outcome, ev evidence, firstFailed outcome) verdict {
	v := verdict{why: "collective mismatch"}
	if m.ClosedBy >= 0 {
		// One member closed while others were in a later collective:
		// every member that said so, in rank order.
		closer := outcome{rank: m.ClosedBy, host: "?", how: "closed"}
		if m.ClosedBy < len(ev.who) {
			closer = ev.who[m.ClosedBy]
		}
		for _, o := range outs {
			if o.rank == m.ClosedBy {
				closer = o
			}
		}
		var in []int
		call := m.InCall
		for _, e := range ev.ends {
			same := e.ClosedBy == m.ClosedBy || e.Echo && e.InCall == m.InCall
			if e.Kind == "mismatch" && e.Comm == m.Comm && same && e.rank != m.ClosedBy && !slices.Contains(in, e.rank) {
				in = append(in, e.rank)
			}
		}
		slices.Sort(in)
		were := "rank " + joinInts(in) + " was"
		if len(in) > 1 {
			were = "ranks " + joinInts(in) + " were"
		}
		v.cause = closer
		v.cause.code = max(closer.code, firstFailed.code, 1)
		v.first = fmt.Sprintf("rank %d (host %s, pid %d) closed communicator %s after %d collectives while %s in %s (collective mismatch)",
			closer.rank, closer.host, closer.pid, m.Comm, m.ClosedCalls, were, call)
		v.consequences = others(outs, func(r int) bool { return r == closer.rank })
		return v
	}
	// Two ranks called different collectives: the member's words name
	// both calls; the cause is no one rank.
	// (mismatch has cut words that name both calls to them.)
	v.cause, v.noRank = firstFailed, true
	v.cause.code = max(firstFailed.code, 1)
	v.first = fmt.Sprintf("collective mismatch on communicator %s: %s", m.Comm, m.Text)
	v.consequences = others(outs, func(int) bool { return false })
	return v
}

// withheld names the ranks that kept a collective waiting: every rank
// that failed timed out in it (or failed because it lost a peer), and
// ranks still running, members of its communicator, said nothing (they
// were not in it, or they would have timed out too).
func withheld(outs []outcome, ev evidence, firstFailed outcome) (verdict, bool) {
	timedOut := map[int]endReport{}
	said := map[int]bool{}
	var first *endReport
	for i, e := range ev.ends {
		said[e.rank] = true
		if e.Kind != "timeout" {
			continue
		}
		if _, ok := timedOut[e.rank]; !ok {
			timedOut[e.rank] = e
		}
		if first == nil && !e.Echo {
			first = &ev.ends[i]
		}
	}
	if first == nil {
		return verdict{}, false
	}
	// Every failed rank was in that call (it timed out in it, or failed
	// in it on the news of another's end or of a link the withholder
	// closed as the communicator ended), or failed on a lost peer.
	inCall := func(r int) bool {
		return slices.ContainsFunc(ev.ends, func(e endReport) bool {
			return e.rank == r && e.Comm == first.Comm && e.InCall == first.InCall
		})
	}
	for _, o := range outs {
		if _, ok := timedOut[o.rank]; !ok && !inCall(o.rank) && o.kind != endPeerLost && !ev.reporters[o.rank] {
			return verdict{}, false // a failure of another kind
		}
	}
	// The members that said they waited counted the others' calls
	// (Behind): where they did, those are the suspects, so a member whose
	// own report is still on its way is not taken for one.
	var behind []int
	for _, e := range ev.ends {
		if e.Kind == "timeout" && e.Comm == first.Comm && e.InCall == first.InCall {
			for _, r := range e.Behind {
				if !slices.Contains(behind, r) {
					behind = append(behind, r)
				}
			}
		}
	}
	var suspects []outcome
	for _, r := range ev.running {
		member := first.Members == nil || slices.Contains(first.Members, r.rank)
		if behind != nil && member && slices.Contains(behind, r.rank) || behind == nil && !said[r.rank] && member {
			suspects = append(suspects, r)
		}
	}
	if len(suspects) == 0 {
		return verdict{}, false
	}
	// Who waited: every member that ended in that call (timed out, or
	// failed in it on the news of another's end).
	var waited, rs []int
	for _, e := range ev.ends {
		if e.Comm == first.Comm && e.InCall == first.InCall && !slices.Contains(waited, e.rank) {
			waited = append(waited, e.rank)
		}
	}
	slices.Sort(waited)
	for _, o := range suspects {
		rs = append(rs, o.rank)
	}
	call := first.InCall
	if call == "" {
		call = "a collective"
	}
	v := verdict{cause: suspects[0], noRank: len(suspects) > 1}
	v.cause.code = max(firstFailed.code, 1)
	whoWaited := "rank " + joinInts(waited)
	if len(waited) > 1 {
		whoWaited = "ranks " + joinInts(waited)
	}
	if len(suspects) == 1 {
		s := suspects[0]
		v.first = fmt.Sprintf("rank %d (host %s, pid %d) did not take part in %s on communicator %s: %s timed out waiting for it", s.rank, s.host, s.pid, call, first.Comm, whoWaited)
		v.why = fmt.Sprintf("timed out waiting for rank %d", s.rank)
	} else {
		v.first = fmt.Sprintf("ranks %s did not take part in %s on communicator %s: %s timed out waiting for them", joinInts(rs), call, first.Comm, whoWaited)
		v.why = fmt.Sprintf("timed out waiting for ranks %s", joinInts(rs))
	}
	// The ranks that stopped: those that ended, and those that said they
	// waited in the call but are still to be terminated (a rank serving
	// the job's store holds its error up to 2 s for the others' questions,
	// capi/holdstore.go): the second line names every rank the first
	// says waited.
	v.consequences = others(outs, func(r int) bool { return slices.Contains(rs, r) })
	for _, r := range waited {
		if !slices.Contains(rs, r) && !slices.Contains(v.consequences, r) {
			v.consequences = append(v.consequences, r)
		}
	}
	slices.Sort(v.consequences)
	return v, true
}
