package capi

import (
	"fmt"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/rank"
)

// ncclCommShrink flags.
const (
	ShrinkDefault = 0x00 // NCCL_SHRINK_DEFAULT
	ShrinkAbort   = 0x01 // NCCL_SHRINK_ABORT
)

// Shrink is ncclCommShrink(comm, exclude, config, flags): a communicator of
// the parent's ranks minus exclude, made by the remaining ranks only
// (rank.Comm.Shrink: through the rendezvous, nothing over the parent's
// links), so it works on a parent that failed because a member died or
// was excluded, or that was revoked. With ShrinkAbort the parent is ended
// first on every member (its calls in flight fail; later ones are refused
// as on a revoked communicator). flags is one value, NCCL_SHRINK_DEFAULT
// when left out.
func (l *Library) Shrink(tid int, h uintptr, exclude []int, cfg Config, flags ...int) (uintptr, error) {
	p, err := l.handles.comm(h, "ncclCommShrink")
	if err != nil {
		return 0, err
	}
	flag := ShrinkDefault
	switch len(flags) {
	case 0:
	case 1:
		flag = flags[0]
	default:
		return 0, fail(InvalidArgument, "ncclCommShrink: %d flag values, want one", len(flags))
	}
	if flag != ShrinkDefault && flag != ShrinkAbort {
		return 0, fail(InvalidArgument, "ncclCommShrink: shrinkFlags %#x: NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)", flag)
	}
	if err := p.shrinkable(); err != nil {
		return 0, err
	}
	for _, r := range exclude {
		if r < 0 || r >= p.nranks {
			return 0, fail(InvalidArgument, "ncclCommShrink: rank %d to exclude is out of range for %d ranks", r, p.nranks)
		}
		if r == p.rank {
			return 0, fail(InvalidArgument, "ncclCommShrink: rank %d excludes itself (excluded ranks do not call ncclCommShrink)", r)
		}
	}
	if flag == ShrinkAbort {
		p.mu.Lock()
		p.revoked = true
		p.ended.Store(true)
		p.mu.Unlock()
		p.rc.Revoke(fmt.Errorf("ncclCommShrink with NCCL_SHRINK_ABORT: %w", errs.ErrAborted))
	}
	return l.child(p, "ncclCommShrink", "s", cfg, true, func() (*rank.Comm, error) { return p.rc.Shrink(p.ctx, exclude) })
}

// shrinkable refuses a parent that cannot be shrunk: one still
// initialising or that never initialised, or aborted. A parent that failed
// (a member died) or was revoked can be: that is what shrink is for.
func (c *Comm) shrinkable() error {
	select {
	case <-c.ready:
	default:
		return fail(InvalidUsage, "ncclCommShrink: communicator %#x is still initialising (non-blocking init): poll ncclCommGetAsyncError until it returns ncclSuccess", c.handle)
	}
	if c.initErr != nil {
		return fail(ResultOf(c.initErr), "ncclCommShrink: communicator %#x failed to initialise: %w", c.handle, c.initErr)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		return fail(InvalidUsage, "ncclCommShrink: communicator %#x was aborted", c.handle)
	}
	return nil
}
