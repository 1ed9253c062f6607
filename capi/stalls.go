package capi

import (
	"sync/atomic"
	"time"
)

// stallReport is how long a collective may wait for its peers on the
// caller's thread before this rank asks the members which of them has not called it, and
// reports it (reportWithheld): under flexrun the report is evidence for
// the verdict if the job then fails, for example when PyTorch's watchdog
// ends the process at its timeout while the call still waits, or when the
// rank that withheld it exits. A call that completes later changes
// nothing.
const stallReport = 5 * time.Second

// inCall is the number of the collective this rank is in on the
// caller's thread (0: none): one atomic store at each call's start and
// end; watchStalls times it.
type inCall struct{ seq atomic.Uint64 }

func (ic *inCall) enter(seq uint64) { ic.seq.Store(seq) }

func (ic *inCall) leave() { ic.seq.Store(0) }

// watchStalls reports collectives that wait longer than stallReport for
// their peers, once per call, while c lives: the call on the caller's
// thread, timed from the first tick that sees it.
func (c *Comm) watchStalls() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var reported, seen uint64
	var since time.Time
	for {
		select {
		case <-c.ctx.Done():
			return
		case now := <-tick.C:
			cur := c.prog.now.seq.Load()
			if cur != seen {
				seen, since = cur, now
			}
			seq := uint64(0)
			if cur != 0 && now.Sub(since) >= stallReport {
				seq = cur
			}
			if seq == 0 || seq == reported {
				continue
			}
			if behind, jobs := c.askBehind(seq); len(behind) > 0 {
				reported = seq
				c.reportWithheld(c.prog.callName(seq), behind, jobs)
			}
		}
	}
}
