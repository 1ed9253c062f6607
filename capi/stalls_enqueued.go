package capi

import (
	"fmt"
	"time"

	"github.com/flexlink/flexlink/internal/comm"
)

// A collective on device buffers that the flag kernels serve (every small
// one on separate GPUs; every size with FLEXLINK_GPU_ENQUEUE=async or
// under CUDA MPS) returns once its work is enqueued: when a member
// withholds it, the waiting happens inside the GPU and no host thread is
// in the call, so the caller's-thread timing of watchStalls never sees
// it. Such a call (progress.enq: the last one enqueued) stays outstanding
// until every member has been found to have made it (progress.caught):
// once this rank has made no call for FLEXLINK_STALL_REPORT with calls
// outstanding, watchStalls asks the members how many calls each has
// made, as for a call that waits on the caller's thread, and reports the
// members behind in the same words ("rank 1 has not called AllReduce
// #5"), naming the first call one of them has not made (the one the
// GPU waits in: a stream runs its work in order). While the report
// stands it asks again, a second later at first and then less often (at
// least every FLEXLINK_STALL_REPORT), and withdraws it (comm.EndResumed)
// once every member has made the call it names. A member still behind a
// later call is reported anew only once it has stayed at its new place
// for FLEXLINK_STALL_REPORT while this rank made no call: a slow member
// stepping through its calls, or members that trail this rank by a call
// or two as work resumes, cost no stream of reports. Nothing here touches
// the driver: the watcher is a library thread (DESIGN.md, "Enqueue and
// return on real GPUs").
//
// A call that waits on the caller's thread (the handshake paths, calls on
// host buffers) is watchStalls' own: while it is in flight, or reported
// and not yet completed, no enqueued call is asked about (its report
// would come after, and replace, the in-flight call's). A report of the
// in-flight call replaces a standing report of an enqueued one in
// flexrun's judge (a rank's later report on a communicator replaces its
// earlier timeouts), and its withdrawal withdraws both.
//
// A call captured in a CUDA graph counts as enqueued (a member that has
// not captured it is behind). Not seen: a withheld replay of a captured
// graph (no host call at all: every member's count of calls agrees), and
// a member that withholds a call this rank has not made yet.

// enqWatch is watchStalls' state for the calls this rank has enqueued.
type enqWatch struct {
	calls    uint64        // this rank's latest call, as last seen
	since    time.Time     // when calls was first seen
	nextAsk  time.Time     // no question before this
	every    time.Duration // while a report stands: the time to the next question
	reported uint64        // the call the standing report names (0: none stands)
	name     string        // its words, as reported
	pos      uint64        // the first call a member had not made, as last asked (0: none)
	posSince time.Time     // when pos was first found
	// moving: a report was withdrawn while a member was still behind a
	// later call; it is reported only once it has stayed there for
	// FLEXLINK_STALL_REPORT.
	moving bool
}

// superseded forgets a standing report that a report of a call in flight
// on the caller's thread has replaced.
func (e *enqWatch) superseded() { e.reported, e.name = 0, "" }

// watchEnqueued is one pass of watchStalls over the calls this rank has
// enqueued on device buffers; tick is watchStalls' period, after
// FLEXLINK_STALL_REPORT. It asks at most once a second; what it does with
// the answer is enqWatch's (a state machine of its own, injected time).
func (c *Comm) watchEnqueued(e *enqWatch, now time.Time, tick, after time.Duration) {
	p, ic := &c.prog, &c.prog.now
	out := p.enq.Load()
	busy := ic.seq.Load() != 0 || ic.flagged.Load() != 0
	if !e.due(now, p.calls.Load(), out, p.caught.Load(), busy, after) {
		return
	}
	calls, jobs := c.askCalls(out, stallWait)
	first, all := c.firstMissing(calls, out)
	st := e.answer(now, out, first, all, tick, after, p.callName)
	if st.withdraw != "" {
		c.reportEnd(comm.EndReport{Kind: comm.EndResumed, InCall: st.withdraw,
			Text: fmt.Sprintf("rank %d of %d: every member has now called %s (enqueued on the GPU)", c.rank, c.nranks, st.withdraw)}, reportWait)
	}
	if st.caught > p.caught.Load() {
		p.caught.Store(st.caught) // only this goroutine stores it
	}
	if st.report != "" {
		behind, jobs := c.behindOf(out, calls, jobs)
		c.reportWithheld(st.report, behind, jobs)
	}
}

// enqStep is what to do with the members' answer (enqWatch.answer).
type enqStep struct {
	withdraw string // the standing report's call, to withdraw ("": none)
	report   string // the call to report the members behind in ("": none)
	caught   uint64 // every member has made the calls up to this one (0: not known)
}

// due reports whether to ask the members now: latest is this rank's
// latest call, out its last call enqueued, caught the last call every
// member was found to have made, busy whether a call is in flight on the
// caller's thread (or reported stalled there, and not yet completed).
// With no report standing it asks once this rank has made no call for
// after, while busy is false and calls are outstanding.
func (e *enqWatch) due(now time.Time, latest, out, caught uint64, busy bool, after time.Duration) bool {
	if latest != e.calls || e.since.IsZero() {
		e.calls, e.since = latest, now
	}
	if now.Before(e.nextAsk) {
		return false
	}
	if e.reported == 0 && (out <= caught || busy || now.Sub(e.since) < after) {
		e.moving = false
		return false
	}
	return true
}

// answer takes the members' answer to a question about this rank's calls
// up to out: first is the first of them a member has not made (0: none),
// all whether every member answered; name gives a call's words.
func (e *enqWatch) answer(now time.Time, out, first uint64, all bool, tick, after time.Duration, name func(uint64) string) enqStep {
	var st enqStep
	if first != e.pos {
		e.pos, e.posSince = first, now
	}
	if e.reported != 0 && all && (first == 0 || first > e.reported) {
		// Every member has made the reported call: withdraw it. One still
		// behind a later call (a slow member stepping through its calls;
		// or this rank's calls go on, as its peers' trail them by a call
		// or two) is reported only once it stays there.
		st.withdraw = e.name
		e.superseded()
		e.every, e.moving = 0, first != 0
	}
	switch {
	case first == 0 && all:
		st.caught, e.moving = out, false
		return st
	case first == 0:
		// A member did not answer (it may be gone): a standing report
		// stands; ask again later.
		e.nextAsk = now.Add(max(after, e.every))
		return st
	case all:
		st.caught = first - 1
	}
	held := now.Sub(e.posSince) >= after
	switch {
	case e.reported == 0 && e.moving && !held:
		e.nextAsk = now.Add(max(tick, time.Second))
		return st
	case e.reported == 0, first != e.reported && held:
		e.reported, e.name, e.moving = first, name(first), false
		st.report = e.name
		if e.every == 0 {
			e.every = max(tick, time.Second)
		}
	}
	e.nextAsk = now.Add(e.every)
	e.every = min(2*e.every, max(after, tick, time.Second))
	return st
}

// firstMissing is, from askCalls' answers, the first of this rank's calls
// up to out that a member has not made (0: none), and whether every
// member answered.
func (c *Comm) firstMissing(calls []int64, out uint64) (first uint64, all bool) {
	all = calls != nil
	for r, n := range calls {
		switch {
		case r == c.rank:
		case n < 0:
			all = false
		case uint64(n) < out && (first == 0 || uint64(n)+1 < first):
			first = uint64(n) + 1
		}
	}
	return first, all
}

// abortAsk bounds abortEnqueued's question: with its report's wait
// (reportWait) it fits in ncclCommAbort's settle, which torch wants back
// within a second.
const abortAsk = 300 * time.Millisecond

// abortEnqueued is ncclCommAbort's word on the calls this rank enqueued
// on device buffers that no member was found to have made: torch's
// watchdog aborts a communicator whose work has not completed within its
// timeout, which may be shorter than FLEXLINK_STALL_REPORT. As a call in
// flight does (nameWithheld), it asks the members and reports those
// behind; inFlight is the call on the caller's thread when the abort
// began (0: none), which reports for itself.
func (c *Comm) abortEnqueued(inFlight uint64) {
	p := &c.prog
	out := p.enq.Load()
	if inFlight != 0 || out <= p.caught.Load() {
		return
	}
	calls, jobs := c.askCalls(out, abortAsk)
	first, _ := c.firstMissing(calls, out)
	if first == 0 {
		return
	}
	behind, jobs := c.behindOf(out, calls, jobs)
	c.reportWithheld(p.callName(first), behind, jobs)
}
