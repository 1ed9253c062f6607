package capi

import (
	"fmt"

	"flexlink/internal/errs"
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
// already, and one still initialising are refused. Split of a revoked
// communicator is refused: shrink it (excluding no rank) and split that.
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
	c.mu.Unlock()
	c.rc.Revoke(fmt.Errorf("ncclCommRevoke: %w", errs.ErrAborted))
	return nil
}
