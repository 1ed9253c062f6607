package fabric

import (
	"context"
	"fmt"
	"sync"

	"github.com/flexlink/flexlink/internal/errs"
)

// Req is the Request implementation transports share: create with NewReq,
// finish once with Complete.
type Req struct {
	once sync.Once
	done chan struct{}
	err  error
}

// NewReq returns a pending request.
func NewReq() *Req { return &Req{done: make(chan struct{})} }

// DoneReq returns a request that already finished with err.
func DoneReq(err error) *Req {
	r := NewReq()
	r.Complete(err)
	return r
}

// Complete finishes the request; later calls are ignored. It reports whether
// this call was the one that finished it.
func (r *Req) Complete(err error) bool {
	first := false
	r.once.Do(func() {
		r.err = err
		close(r.done)
		first = true
	})
	return first
}

func (r *Req) Done() <-chan struct{} { return r.done }

// Err is nil until Done, then the outcome.
func (r *Req) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Wait blocks until Done or ctx ends.
func (r *Req) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return CtxErr(ctx)
	}
}

// CtxErr converts a finished context into an error that wraps errs.ErrTimeout
// for deadlines (and context.DeadlineExceeded), or the context's error.
func CtxErr(ctx context.Context) error {
	err := ctx.Err()
	if err == context.DeadlineExceeded {
		return fmt.Errorf("%w: %w", errs.ErrTimeout, err)
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return cause
	}
	return err
}
