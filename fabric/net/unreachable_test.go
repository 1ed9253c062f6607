package net_test

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestUnreachableIsPeerLost: a dial that says the peer cannot be reached
// is a lost peer; other dial errors (a bad address, a cancelled context)
// are not.
func TestUnreachableIsPeerLost(t *testing.T) {
	for _, tc := range []struct {
		err  error
		lost bool
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}, true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}, true},
		{&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)}, false},
		{context.Canceled, false},
	} {
		got := fnet.Unreachable(tc.err)
		if errors.Is(got, errs.ErrPeerLost) != tc.lost {
			t.Errorf("Unreachable(%v) = %v: peer lost %v, want %v", tc.err, got, !tc.lost, tc.lost)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("Unreachable(%v) = %v: the dial's error is lost", tc.err, got)
		}
	}
}
