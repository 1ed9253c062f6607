package comm

import (
	"context"
	"errors"
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
// call queue). A call's context is the call's (Run's contract): one used
// after Run returns reads as ended (with the call's error, or
// context.Canceled) until the next call begins, and then as that call's.
type callDeadline struct {
	mu     sync.Mutex
	parent context.Context
	at     time.Time
	ended  bool
	final  error                       // why the ended call's context was done, if it was
	real   atomic.Pointer[deadlineCtx] // made by the first Done of a call, or its first error
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
	d.parent, d.at, d.ended, d.final = parent, at, false, nil
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
	r := d.real.Swap(nil)
	if r != nil {
		d.final = r.Err() // a call that ran out of time stays so
	}
	d.ended = true
	d.parent = nil
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
	return d.make().Done()
}

// make returns the call's waitable context, making it if need be (d.mu
// held).
func (d *callDeadline) make() *deadlineCtx {
	if r := d.real.Load(); r != nil {
		return r
	}
	parent := d.parent
	if d.ended {
		parent = endedCtx(d.final)
	}
	ctx, cancel := context.WithDeadline(parent, d.at)
	r := &deadlineCtx{Context: ctx, cancel: cancel}
	d.real.Store(r)
	return r
}

// endedCtx is a context already done with err (context.Canceled if nil),
// for a call's context used after the call.
func endedCtx(err error) context.Context {
	if errors.Is(err, context.DeadlineExceeded) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Time{})
		cancel()
		return ctx
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Err reports why the call's context is done. Until then it answers
// from the deadline and the caller's context without making anything;
// once it has an answer, the waitable context is made, so the answer
// never changes.
func (d *callDeadline) Err() error {
	if r := d.real.Load(); r != nil {
		return r.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.real.Load() == nil && !d.ended && d.parent.Err() == nil && time.Now().Before(d.at) {
		return nil
	}
	return d.make().Err()
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
