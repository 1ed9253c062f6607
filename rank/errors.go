package rank

import (
	"errors"

	"github.com/flexlink/flexlink/internal/errs"
)

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
