package capi

import "time"

// drain waits, before a call that uses the communicator's queue on the
// caller's thread (a call on host buffers, a split or a shrink), until the
// device calls handed to the enqueue-and-return engine have been run
// (collectives/plane/async.go): every member then sees the calls in the
// order the program made them. Bounded by the communicator's life (its
// abort).
func (c *Comm) drain() error {
	if c.dc == nil {
		return nil
	}
	if err := c.dc.Drain(c.ctx); err != nil {
		return fail(ResultOf(err), "rank %d: the device calls before this one: %w", c.rank, err)
	}
	return nil
}

// stallReport is how long a device call handed to the engine may wait for
// its peers before this rank asks the members which of them has not
// called it, and reports it (reportWithheld): under flexrun the report is
// evidence for the verdict if the job then fails, for example when
// PyTorch's watchdog ends the process at its timeout while the call still
// waits. A call that completes later changes nothing.
const stallReport = 5 * time.Second

// watchStalls reports device calls that wait longer than stallReport for
// their peers, once per call, while c lives.
func (c *Comm) watchStalls() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var reported uint64
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-tick.C:
		}
		n, ran := c.dc.Pending()
		seq := c.prog.latest()
		if n == 0 || ran < stallReport || seq == reported {
			continue
		}
		if behind := c.askBehind(seq); len(behind) > 0 {
			reported = seq
			c.reportWithheld(c.prog.callName(seq), behind)
		}
	}
}
