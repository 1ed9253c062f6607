package rank

import (
	"errors"

	"github.com/flexlink/flexlink/internal/errs"
)

// Sentinel errors callers act on; test with errors.Is. Every error of a
// collective that has started (a peer, a link, a deadline, the
// communicator's end) wraps one of these and names the ranks, host and
// link involved. An argument error found before the call starts (invalid
// dtype or op, a count or buffer that does not fit, a root or peer out of
// range) wraps none of them and leaves the communicator usable.
var (
	// ErrPeerLost: a peer rank disappeared (its process died, its
	// connection dropped).
	ErrPeerLost = errs.ErrPeerLost
	// ErrTimeout: a deadline passed before the call completed
	// (FLEXLINK_TIMEOUT, or ctx's).
	ErrTimeout = errs.ErrTimeout
	// ErrMismatch: ranks called different collectives, or the same with
	// different arguments (count, dtype, op, root, sequence).
	ErrMismatch = errs.ErrMismatch
	// ErrNotSupported: a feature, library or device is not available here.
	ErrNotSupported = errs.ErrNotSupported
	// ErrAborted: the job was aborted (Abort, or the launcher) or the
	// communicator revoked (Revoke).
	ErrAborted = errs.ErrAborted
	// ErrClosed: the communicator (or a link of it) was closed.
	ErrClosed = errs.ErrClosed
)

// ExitPeerLost is the exit status of a rank that failed only because a peer
// was lost; flexrun reports such ranks as consequences of the rank that
// failed first.
const ExitPeerLost = errs.ExitPeerLost

// ExitCode is the exit status for a program ending with err: ExitPeerLost
// when err wraps ErrPeerLost, 1 otherwise (0 for nil).
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrPeerLost):
		return ExitPeerLost
	}
	return 1
}
