package nccl

import (
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/internal/errs"
)

// Result is an ncclResult_t.
type Result int32

// Results (values from nccl.h).
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	Timeout            Result = 8
)

var resultNames = [...]string{
	Success:            "ncclSuccess",
	UnhandledCudaError: "ncclUnhandledCudaError",
	SystemError:        "ncclSystemError",
	InternalError:      "ncclInternalError",
	InvalidArgument:    "ncclInvalidArgument",
	InvalidUsage:       "ncclInvalidUsage",
	RemoteError:        "ncclRemoteError",
	InProgress:         "ncclInProgress",
	Timeout:            "ncclTimeout",
}

// String is the enumerator's name in nccl.h, "ncclResult(42)" for others.
func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// Error is a failed NCCL call. Match it with errors.As. Its message reads
// "ncclAllReduce: unhandled cuda error (ncclUnhandledCudaError): <detail>".
type Error struct {
	Func string // entry point, "ncclAllReduce"
	Code Result
	Desc string // ncclGetErrorString(Code)
	Last string // ncclGetLastError: the detail NCCL logged, "" if none
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%s)", e.Func, e.Desc, e.Code)
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}

// Unwrap maps the results callers act on to flexlink's sentinels:
// ncclRemoteError (a peer process died or its network failed) to
// errs.ErrPeerLost and ncclTimeout to errs.ErrTimeout.
func (e *Error) Unwrap() error {
	switch e.Code {
	case RemoteError:
		return errs.ErrPeerLost
	case Timeout:
		return errs.ErrTimeout
	}
	return nil
}

// check turns fn's result into an *Error (nil for ncclSuccess), asking the
// library for its description and, for comm (0: none), the last error. Call
// it on the thread that made the failed call.
func check(a api, fn string, r Result, comm commHandle) error {
	if r == Success {
		return nil
	}
	e := &Error{Func: fn, Code: r, Desc: a.errorString(r), Last: strings.TrimSpace(a.lastError(comm))}
	if e.Desc == "" {
		e.Desc = "unknown error"
	}
	return e
}
