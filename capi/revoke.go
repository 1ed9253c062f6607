package capi

import (
	"fmt"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/rank"
)

// RevokeDefault is NCCL_REVOKE_DEFAULT, the only revokeFlags value.
const RevokeDefault = 0

// Revoke is ncclCommRevoke(comm, flags) as NCCL 2.28.9 documents it: it
// stops the communicator's operations in flight and refuses later ones
// (ncclInvalidUsage) without freeing it, so it can be destroyed or shrunk
// (ncclCommShrink). flexlink ends the communicator on every member (as
// ncclCommAbort does, see rank.Comm.Revoke), so no peer waits on it: their
// calls in flight fail naming it, this rank and its host. Its parent,
// siblings and children go on. It returns once that is done (the
// communicator is quiescent on this rank: ncclSuccess, also for a
// non-blocking one, and ncclCommGetAsyncError reports ncclSuccess from
// then on). flags other than NCCL_REVOKE_DEFAULT, a communicator revoked
// already, and one still initialising are refused. A revoked communicator
// can be split when every member revoked it itself (as NCCL's users do
// before they split: see split); on a member that only heard of another's
// revoke, calls and splits fail with the revoker's reason.
func (l *Library) Revoke(h uintptr, flags int) error {
	c, err := l.handles.comm(h, "ncclCommRevoke")
	if err != nil {
		return err
	}
	if flags != RevokeDefault {
		return fail(InvalidArgument, "ncclCommRevoke: revokeFlags %#x: only NCCL_REVOKE_DEFAULT (0) is defined", flags)
	}
	select {
	case <-c.ready:
	default:
		return fail(InvalidUsage, "ncclCommRevoke: communicator %#x is still initialising", c.handle)
	}
	if c.initErr != nil {
		return fail(ResultOf(c.initErr), "ncclCommRevoke: communicator %#x failed to initialise: %w", c.handle, c.initErr)
	}
	c.mu.Lock()
	if c.revoked || c.aborted {
		c.mu.Unlock()
		return fail(InvalidArgument, "ncclCommRevoke: communicator %#x (rank %d of %d) is revoked already", c.handle, c.rank, c.nranks)
	}
	c.revoked = true
	c.ended.Store(true)
	c.mu.Unlock()
	c.rc.Revoke(fmt.Errorf("ncclCommRevoke: %w", errs.ErrAborted))
	return nil
}

// isRevoked reports whether this rank revoked c (ncclCommRevoke, or
// ncclCommShrink with NCCL_SHRINK_ABORT).
func (c *Comm) isRevoked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revoked
}

// split is ncclCommSplit's rank-level work on c: over c's links while it
// is healthy; once this rank revoked it, through a copy of it made by the
// rendezvous (rank.Comm.Shrink excluding nobody: nothing over c's ended
// links), split and then closed. Every member takes the same path as long
// as every member revoked c before splitting it.
func (c *Comm) split(color, key int) (*rank.Comm, error) {
	if !c.isRevoked() {
		return c.rc.Split(c.ctx, color, key)
	}
	cp, err := c.rc.Shrink(c.ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("split of revoked communicator rank %d of %d: copy it: %w", c.rank, c.nranks, err)
	}
	defer cp.Close()
	return cp.Split(c.ctx, color, key)
}

// Finalize is ncclCommFinalize: every call has enqueued its work on its
// caller's stream when it returned, so nothing is left to flush here;
// what is left runs on the callers' streams. A communicator this rank revoked is refused
// with ncclInvalidUsage, as NCCL documents (destroy or shrink it instead).
func (l *Library) Finalize(h uintptr) error {
	c, err := l.handles.comm(h, "ncclCommFinalize")
	if err != nil {
		return err
	}
	if c.isRevoked() {
		return fail(InvalidUsage, "ncclCommFinalize: communicator %#x (rank %d of %d) was revoked: destroy or shrink it", c.handle, c.rank, c.nranks)
	}
	_, _, _, err = l.Info(h, "ncclCommFinalize")
	return err
}
