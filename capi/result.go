package capi

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/rank"
)

// Result is an ncclResult_t.
type Result int32

// Results, with the values of NCCL's public header.
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	numResults         Result = 8
)

var resultNames = [numResults]string{
	"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
}

// resultTexts are ncclGetErrorString's answers.
var resultTexts = [numResults]string{
	"no error",
	"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
	"unhandled system error (run with NCCL_DEBUG=INFO for details)",
	"internal error - please report this issue to the flexlink developers",
	"invalid argument (run with NCCL_DEBUG=WARN for details)",
	"invalid usage (run with NCCL_DEBUG=WARN for details)",
	"remote process exited or there was a network error",
	"NCCL operation in progress",
}

func (r Result) String() string {
	if r >= 0 && r < numResults {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// ErrorString is ncclGetErrorString(r).
func ErrorString(r Result) string {
	if r >= 0 && r < numResults {
		return resultTexts[r]
	}
	return "unknown result code"
}

// Error is a failure with the result code the C caller sees.
type Error struct {
	Code Result
	Err  error
	// Local: the call was refused on this rank before anything was sent
	// or enqueued, so the communicator is as it was: the call fails, later
	// calls do not (ncclGetLastError still says why).
	Local bool
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// fail makes an *Error with a formatted message.
func fail(code Result, format string, args ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// refuse makes a Local *Error: a call refused before it touched the
// communicator.
func refuse(code Result, format string, args ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...), Local: true}
}

// isLocal reports whether err refused a call without touching the
// communicator (see Error.Local).
func isLocal(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Local || errors.Is(err, rank.ErrSuspended)
}

// ResultOf maps an error to the ncclResult_t NCCL would return for it:
// the code of an *Error in its chain, ncclRemoteError for a lost peer,
// an abort or a timeout (a remote rank failed or went away), ncclInvalidUsage
// for a mismatch between ranks or a closed communicator, ncclInvalidArgument
// for an unsupported type, and ncclSystemError otherwise.
func ResultOf(err error) Result {
	var e *Error
	switch {
	case err == nil:
		return Success
	case errors.As(err, &e) && e.Code != SystemError:
		return e.Code
	case errors.Is(err, rank.ErrSuspended), errors.Is(err, rank.ErrNotSuspended):
		return InvalidUsage
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, errs.ErrMismatch), errors.Is(err, errs.ErrClosed):
		return InvalidUsage
	case errors.Is(err, errs.ErrPeerLost), errors.Is(err, errs.ErrAborted),
		errors.Is(err, errs.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return RemoteError
	case errors.Is(err, errs.ErrNotSupported):
		return InvalidArgument
	case errors.Is(err, errs.ErrAuth):
		return InvalidUsage
	}
	return SystemError
}

// lastError is the text of the process's last failure
// (ncclGetLastError(NULL)).
type lastError struct {
	mu   sync.Mutex
	text string
}

func (e *lastError) set(text string) {
	e.mu.Lock()
	e.text = text
	e.mu.Unlock()
}

func (e *lastError) get() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.text
}
