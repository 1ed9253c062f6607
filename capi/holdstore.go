package capi

import (
	"context"
	"sync"
	"time"
)

// The world's bootstrap store lives in the process that made the unique
// id (ncclGetUniqueId's rank, usually rank 0). When a collective times out
// because a member withheld it, every waiting member asks the others,
// through that store, who has not called it (withheld.go). A program that
// exits on the first error (most C programs, and torch's watchdog) would
// take the store with it while the other waiting members are still asking,
// and their errors would then not name the withholder (seen under load:
// the last member's question was put, the withholder's answer never came).
// So the process that serves the store, having named the members behind
// for its own timed-out call, waits before returning that error until
// each other waiting member has asked about the same call and every
// member has answered it and the asker has read the answers, at most
// serveGrace.

// serveGrace bounds that wait: a failure path (the job is failing), and
// never an abort's (torch's watchdog wants its abort back within a
// second; aborts do not wait here).
const serveGrace = 2 * time.Second

// questions are the members' recent requests as answerStalls read them.
type questions struct {
	mu     sync.Mutex
	recent [32]askedAt // by request number modulo its length
}

type askedAt struct {
	k   uint64 // the request's number (0: empty)
	req stallRequest
}

func (q *questions) note(k uint64, req stallRequest) {
	q.mu.Lock()
	q.recent[k%uint64(len(q.recent))] = askedAt{k: k, req: req}
	q.mu.Unlock()
}

// find is the number of member r's request about call seq (0: not seen).
func (q *questions) find(r int, seq uint64) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, a := range q.recent {
		if a.k != 0 && a.req.Rank == r && a.req.Seq == seq {
			return a.k
		}
	}
	return 0
}

// holdStore is the serving process's wait (see above) after its call seq
// timed out with the members calls[r] < seq behind; it returns at once
// where this process does not serve the store.
func (c *Comm) holdStore(seq uint64, calls []int64) {
	if c.fam == nil || c.fam.srv == nil || c.prog.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), serveGrace)
	defer cancel()
	for r, n := range calls {
		if r == c.rank || n >= 0 && uint64(n) < seq {
			continue // this rank, or a member that has not called it (it does not ask)
		}
		k := c.prog.asks.find(r, seq)
		for k == 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
			k = c.prog.asks.find(r, seq)
		}
		for a := range c.nranks {
			if a == r {
				continue
			}
			if _, err := c.prog.store.Get(ctx, answerKey(c.prog.key, k, a)); err != nil {
				return
			}
		}
		// The answers being in the store is not enough: the member may not
		// have read them yet, and this process's exit would take them
		// with it (seen in CI: rank 2's error then named nobody).
		if _, err := c.prog.store.Get(ctx, readKey(c.prog.key, k)); err != nil {
			return
		}
	}
}
