package capi

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flexlink/flexlink/internal/comm"
)

// stallReport is how long (FLEXLINK_STALL_REPORT's default) a collective
// may wait for its peers on the caller's thread (or, enqueued on the GPU,
// be outstanding while this rank makes no call: stalls_enqueued.go)
// before this rank asks the members which of them has not called it, and
// reports it (reportWithheld): under flexrun the report is evidence for
// the verdict if the job then fails, for example when PyTorch's watchdog
// ends the process at its timeout while the call still waits, or when
// the rank that withheld it exits. A call that completes
// later (successfully) withdraws the report (comm.EndResumed): the member
// it waited for was late, not missing.
const stallReport = 5 * time.Second

// inCall is the collective this rank is in on the caller's thread, timed
// by watchStalls: a few atomics at each call's start and end, no lock.
type inCall struct {
	seq    atomic.Uint64 // the call in flight (0: none)
	ok     atomic.Uint64 // the highest call that completed successfully
	failed atomic.Uint64 // the last call that failed (nameWithheld)
	// flagged is the call watchStalls reported stalled and has not yet
	// seen complete (0: none): its end wakes watchStalls (wake, made
	// before flagged is first set), which withdraws the report at once,
	// while the process still runs.
	flagged atomic.Uint64
	wake    chan struct{}
}

func (ic *inCall) enter(seq uint64) { ic.seq.Store(seq) }

// leave ends the call in flight: one that did not fail (fail, before
// leave) completed successfully.
func (ic *inCall) leave() {
	seq := ic.seq.Swap(0)
	if seq == 0 || ic.failed.Load() == seq {
		return
	}
	for {
		old := ic.ok.Load()
		if old >= seq || ic.ok.CompareAndSwap(old, seq) {
			break
		}
	}
	if f := ic.flagged.Load(); f != 0 && seq >= f {
		select {
		case ic.wake <- struct{}{}:
		default:
		}
	}
}

// fail marks call seq failed: it never withdraws a stall reported for it
// (its failure is reported on its own, nameWithheld).
func (ic *inCall) fail(seq uint64) { ic.failed.Store(seq) }

// completed is the highest call that completed successfully.
func (ic *inCall) completed() uint64 { return ic.ok.Load() }

// watchStalls reports collectives that wait longer than stallReport for
// their peers, once per call, while c lives: the call on the caller's
// thread, timed from the first tick that sees it, and the calls enqueued
// on device buffers that wait inside the GPU (watchEnqueued). Once a
// reported call (or a later one) has completed successfully it tells
// flexrun so (comm.EndResumed), before it reports any later stall: the
// judge takes a rank's later report on a communicator over its earlier
// timeouts there.
func (c *Comm) watchStalls() {
	ic := &c.prog.now
	ic.wake = make(chan struct{}, 1)
	after, err := c.lib.env.Duration("FLEXLINK_STALL_REPORT")
	if err != nil || after == 0 { // 0: never (the value was checked at init)
		return
	}
	// Ticks at half the setting (at most 1 s apart): a call is seen
	// stalled at most half the setting late.
	period := max(min(time.Second, after/2), 10*time.Millisecond)
	tick := time.NewTicker(period)
	defer tick.Stop()
	var enq enqWatch // the calls enqueued on device buffers (stalls_enqueued.go)
	var reported, seen uint64
	var reportedName string // the reported call's words, as reported
	var since time.Time
	for {
		var now time.Time
		select {
		case <-c.ctx.Done():
			return
		case <-ic.wake:
			now = time.Now()
		case now = <-tick.C:
		}
		if f := ic.flagged.Load(); f != 0 && ic.completed() >= f {
			ic.flagged.Store(0)
			c.reportEnd(comm.EndReport{Kind: comm.EndResumed, InCall: reportedName,
				Text: fmt.Sprintf("rank %d of %d: %s completed after waiting for its peers", c.rank, c.nranks, reportedName)}, reportWait)
		}
		c.watchEnqueued(&enq, now, period, after)
		cur := ic.seq.Load()
		if cur != seen {
			seen, since = cur, now
		}
		seq := uint64(0)
		if cur != 0 && now.Sub(since) >= after {
			seq = cur
		}
		if seq == 0 || seq <= reported {
			continue
		}
		if behind, jobs := c.askBehind(seq); len(behind) > 0 {
			reported, reportedName = seq, c.prog.callName(seq)
			ic.flagged.Store(seq)
			enq.superseded() // the judge takes this report over an enqueued call's
			c.reportWithheld(reportedName, behind, jobs)
			if ic.completed() >= seq || ic.seq.Load() != seq {
				// It ended while asked or reported (leave saw no flag):
				// the next pass looks at once.
				select {
				case ic.wake <- struct{}{}:
				default:
				}
			}
		}
	}
}
