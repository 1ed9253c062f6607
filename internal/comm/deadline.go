package comm

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callDeadline is a call's context under the communicator's default
// deadline (FLEXLINK_TIMEOUT) when the caller's context has none. It
// costs nothing until something waits on it: Deadline and Err answer
// from the deadline itself, and only Done (a wait) makes the timer and
// the channel, a context.WithDeadline of the caller's context. A call
// that only enqueues (the GPU planes' flag kernels, which carry the
// timeout into the kernel) makes no allocation for its deadline; with
// context.WithTimeout every call made four.
//
// A communicator keeps one and reuses it for each call (Run holds the
// call queue). A call's context is the call's: one used after Run
// returns reads as ended (context.Canceled) until the next call begins,
// and then as that call's.
type callDeadline struct {
	mu     sync.Mutex
	parent context.Context
	at     time.Time
	ended  bool
	real   atomic.Pointer[deadlineCtx] // made by the first Done of a call
}

// deadlineCtx is the context a wait needs: the caller's context with the
// deadline, and its cancel.
type deadlineCtx struct {
	context.Context
	cancel context.CancelFunc
}

// begin makes d the context of a call that starts now under parent with
// the deadline at.
func (d *callDeadline) begin(parent context.Context, at time.Time) context.Context {
	d.mu.Lock()
	d.parent, d.at, d.ended = parent, at, false
	r := d.real.Swap(nil) // made by a use after the last call ended
	d.mu.Unlock()
	if r != nil {
		r.cancel()
	}
	return d
}

// end ends the call: a wait made for it is released (its timer stopped),
// and the context reads as ended.
func (d *callDeadline) end() {
	d.mu.Lock()
	d.ended = true
	d.parent = nil
	r := d.real.Swap(nil)
	d.mu.Unlock()
	if r != nil {
		r.cancel()
	}
}

// Deadline reports the call's deadline.
func (d *callDeadline) Deadline() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at, true
}

// Done makes the call's waitable context on first use.
func (d *callDeadline) Done() <-chan struct{} {
	if r := d.real.Load(); r != nil {
		return r.Done()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.real.Load(); r != nil {
		return r.Done()
	}
	parent := d.parent
	if d.ended {
		parent = endedCtx()
	}
	ctx, cancel := context.WithDeadline(parent, d.at)
	r := &deadlineCtx{Context: ctx, cancel: cancel}
	d.real.Store(r)
	return r.Done()
}

// endedCtx is a context already canceled, for a call's context used after
// the call.
func endedCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Err reports why the call's context is done, without making it.
func (d *callDeadline) Err() error {
	if r := d.real.Load(); r != nil {
		return r.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.real.Load(); r != nil {
		return r.Err()
	}
	switch {
	case d.ended:
		return context.Canceled
	case d.parent.Err() != nil:
		return d.parent.Err()
	case !time.Now().Before(d.at):
		return context.DeadlineExceeded
	}
	return nil
}

// Value looks key up in the waitable context once made (so contexts
// derived from this one attach to its cancellation directly), else in
// the caller's.
func (d *callDeadline) Value(key any) any {
	if r := d.real.Load(); r != nil {
		return r.Value(key)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.real.Load(); r != nil {
		return r.Value(key)
	}
	if d.parent == nil {
		return nil
	}
	return d.parent.Value(key)
}
