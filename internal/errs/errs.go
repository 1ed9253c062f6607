// Package errs holds the sentinel errors every layer wraps. The public API
// (package rank) re-exports them; callers test with errors.Is.
package errs

import "errors"

var (
	// ErrPeerLost: a peer rank disappeared (process died, connection dropped).
	ErrPeerLost = errors.New("peer lost")
	// ErrTimeout: a deadline passed before the operation completed.
	ErrTimeout = errors.New("timeout")
	// ErrMismatch: ranks called different collectives, or with different
	// arguments (count, dtype, op, root, sequence).
	ErrMismatch = errors.New("collective mismatch")
	// ErrNotSupported: a feature, library or device is not available here.
	ErrNotSupported = errors.New("not supported")
	// ErrAborted: the job was aborted (by a rank, or by the launcher).
	ErrAborted = errors.New("aborted")
	// ErrAuth: a bootstrap peer could not prove it belongs to the job.
	ErrAuth = errors.New("authentication failed")
	// ErrClosed: the object was closed.
	ErrClosed = errors.New("closed")
)

// ExitPeerLost is the exit status a rank program ends with when it failed
// only because a peer was lost (EX_TEMPFAIL); flexrun then reports it as a
// consequence, not as the job's cause. rank.ExitCode picks it.
const ExitPeerLost = 75
