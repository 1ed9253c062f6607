package rank

import "flexlink/internal/errs"

// Sentinel errors callers act on; test with errors.Is. Every error a
// collective returns wraps one of these and names the ranks, host and link
// involved.
var (
	ErrPeerLost     = errs.ErrPeerLost
	ErrTimeout      = errs.ErrTimeout
	ErrMismatch     = errs.ErrMismatch
	ErrNotSupported = errs.ErrNotSupported
	ErrAborted      = errs.ErrAborted
	ErrClosed       = errs.ErrClosed
)
