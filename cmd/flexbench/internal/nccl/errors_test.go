package nccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestErrorText checks that a failed call's error is composed from
// ncclGetErrorString and ncclGetLastError, asked on the failing call's
// communicator and inside its Runner, and carries the rank.
func TestErrorText(t *testing.T) {
	f, cr, c, err := fakeComm(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	f.fail["ncclAllReduce"] = UnhandledCudaError
	f.desc[UnhandledCudaError] = "unhandled cuda error"
	f.last = "Cuda failure 'out of memory'\n"
	queriedInRunner := false
	run := cr.run
	c.run = func(call func() error) error {
		return run(func() error {
			err := call()
			queriedInRunner = len(f.lastFor) == 1
			return err
		})
	}

	err = c.AllReduce(0x1000, 0x2000, 8, dtype.Float32, dtype.Sum, 0)
	const want = "nccl rank 2 of 4: ncclAllReduce: unhandled cuda error (ncclUnhandledCudaError): Cuda failure 'out of memory'"
	if err == nil || err.Error() != want {
		t.Fatalf("error %q,\nwant  %q", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Func != "ncclAllReduce" || e.Code != UnhandledCudaError {
		t.Fatalf("errors.As: %#v", e)
	}
	if len(f.lastFor) != 1 || f.lastFor[0] != c.h {
		t.Errorf("ncclGetLastError asked for %v, want once for comm %#x", f.lastFor, c.h)
	}
	if !queriedInRunner {
		t.Error("error text was not read inside the Runner (NCCL keeps it per thread)")
	}
}

func TestErrorWithoutDetail(t *testing.T) {
	f := newFake()
	e := check(f, "ncclGroupEnd", InvalidUsage, 0)
	if got, want := e.Error(), "ncclGroupEnd: unknown error (ncclInvalidUsage)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if check(f, "ncclGroupEnd", Success, 0) != nil {
		t.Error("ncclSuccess gave an error")
	}
	if len(f.lastFor) != 1 || f.lastFor[0] != 0 {
		t.Errorf("ncclGetLastError asked for %v, want once for comm 0", f.lastFor)
	}
}

func TestErrorSentinels(t *testing.T) {
	for _, tc := range []struct {
		r    Result
		want error
	}{{RemoteError, errs.ErrPeerLost}, {Timeout, errs.ErrTimeout}} {
		if err := check(newFake(), "ncclSend", tc.r, 1); !errors.Is(err, tc.want) {
			t.Errorf("%v: %v does not wrap %v", tc.r, err, tc.want)
		}
	}
	for _, r := range []Result{UnhandledCudaError, SystemError, InternalError, InvalidArgument, InvalidUsage} {
		err := check(newFake(), "ncclSend", r, 1)
		for _, s := range []error{errs.ErrPeerLost, errs.ErrTimeout, errs.ErrNotSupported} {
			if errors.Is(err, s) {
				t.Errorf("%v wraps %v", r, s)
			}
		}
	}
}

func TestLibErrors(t *testing.T) {
	f := newFake()
	f.fail["ncclGetUniqueId"] = SystemError
	f.desc[SystemError] = "unhandled system error"
	f.last = "no socket interface found"
	l := &Lib{api: f, path: "fake"}
	_, err := l.GetUniqueID()
	if err == nil || !strings.HasSuffix(err.Error(), "ncclGetUniqueId: unhandled system error (ncclSystemError): no socket interface found") {
		t.Errorf("GetUniqueID: %v", err)
	}
	f.version = 22703
	if v, err := l.Version(); err != nil || v != 22703 {
		t.Errorf("Version = %d, %v", v, err)
	}
	f.fail["ncclGetVersion"] = InternalError
	if _, err := l.Version(); err == nil {
		t.Error("Version: no error from a failing ncclGetVersion")
	}
}
