package capi

import (
	"fmt"
	"sync"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/rank"
)

// Abort is ncclCommAbort: it ends this communicator on every member at
// once, and nothing else. Every member's pending and later calls on it
// fail (ncclRemoteError) with an error that names the communicator, this
// rank and its host; its parent, siblings and children, and communicators
// of other ncclUniqueIds, go on. Then it frees the communicator without
// waiting for the others. It may be called from any thread while a call is
// in flight, and inside ncclGroupStart/End (NCCL ≥ 2.22's group abort):
// it takes effect at once there too, so aborting every communicator of a
// group never waits on one of them.
func (l *Library) Abort(h uintptr) error {
	c, err := l.handles.comm(h, "ncclCommAbort")
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.aborted = true
	c.ended.Store(true)
	c.mu.Unlock()
	reason := fmt.Errorf("ncclCommAbort: %w", errs.ErrAborted)
	select {
	case <-c.ready:
		// First on every member, so that their calls, and this rank's,
		// fail naming the abort (not the end of this rank's call).
		if c.rc != nil {
			c.rc.Revoke(reason)
		}
	default:
	}
	inFlight := c.prog.now.seq.Load()
	c.cancel() // ends this rank's calls in flight, and an initialisation
	// Calls enqueued on device buffers that are outstanding ask the
	// members who has not made them (stalls_enqueued.go), while a call on
	// host buffers that ends now asks who has not called it
	// (withheld.go): let them, over the store, before the communicator
	// (and maybe the world with its store) is closed.
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		select {
		case <-c.ready:
			c.abortEnqueued(inFlight)
		default: // not initialised: nothing was called
		}
	}()
	c.prog.settle(stallWait + 100*time.Millisecond)
	<-asked
	<-c.ready
	if c.rc != nil {
		c.rc.Revoke(reason)
	}
	l.destroyQuiet(c)
	return nil
}

// family is the communicators of one process that share a world: one
// ncclCommInitRank (or one rank of ncclCommInitAll) and everything split
// or shrunk from it. The world's rank.Comm (its bootstrap connection and
// the rendezvous this process may serve) stays open until the last of
// them is destroyed, so that destroying or aborting a parent leaves its
// children working, as in NCCL.
type family struct {
	mu    sync.Mutex
	n     int        // live communicators
	world *rank.Comm // the world communicator
	srv   *served    // the rendezvous this process serves for it; nil when another does
	// served: which world ranks' process serves the rendezvous.
	served servedBy
}

// join adds a communicator to f and returns f.
func (f *family) join() *family {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return f
}

// leave drops one communicator and reports whether it was the last.
func (f *family) leave() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	return f.n == 0
}

// release closes what c holds when it is destroyed: its own rank.Comm
// (not the world's while others of its family live), then, with the
// family's last communicator, the world and its rendezvous.
func (c *Comm) release() {
	l := c.lib
	closeRC := func(rc *rank.Comm) {
		if err := rc.Close(); err != nil {
			l.log.Debug("close communicator", "rank", c.rank, "error", err)
		}
	}
	f := c.fam
	if f == nil { // never initialised
		if c.rc != nil {
			closeRC(c.rc)
		}
		l.ids.unserve(c.srv)
		return
	}
	if c.rc != nil && c.rc != f.world {
		closeRC(c.rc)
	}
	if f.leave() {
		closeRC(f.world)
		l.ids.unserve(f.srv)
	}
}
