package nettest_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/nettest"
	"github.com/flexlink/flexlink/fabric/net/tcp"
)

// broken wraps the tcp provider and breaks one rule of the contract.
type broken struct {
	nettest.Wrapped
	bug string
}

func newBroken(p net.Provider, bug string) broken {
	return broken{nettest.Wrapped{Provider: p,
		Send: func(s net.SendConn) net.SendConn { return brokenSend{s, bug} },
		Recv: func(r net.RecvConn) net.RecvConn { return brokenRecv{r, bug} },
	}, bug}
}

func (b broken) Connect(ctx context.Context, dev int, h []byte) (net.SendConn, error) {
	if b.bug == "TrimsHandle" && len(h) > 28 {
		h = h[:28]
	}
	return b.Wrapped.Connect(ctx, dev, h)
}

type brokenSend struct {
	net.SendConn
	bug string
}

func (s brokenSend) ISend(buf []byte, tag uint64, mr net.MemRegion) (net.Request, error) {
	if s.bug == "FlipsBit" && len(buf) > 100 {
		buf = slices.Clone(buf)
		buf[len(buf)/2] ^= 0x10
	}
	return s.SendConn.ISend(buf, tag, mr)
}

func (s brokenSend) Abort(err error) {
	if s.bug == "LosesAbortError" {
		err = errors.New("some other error")
	}
	s.SendConn.Abort(err)
}

type brokenRecv struct {
	net.RecvConn
	bug string
}

func (r brokenRecv) IRecv(bufs [][]byte, tags []uint64, mrs []net.MemRegion) (net.Request, error) {
	if r.bug == "IgnoresTags" && len(bufs) > 1 {
		bufs = slices.Clone(bufs)
		slices.Reverse(bufs) // messages land by position, not by tag
	}
	q, err := r.RecvConn.IRecv(bufs, tags, mrs)
	if err != nil || r.bug != "HidesRemote" {
		return q, err
	}
	return plainErr{q}, nil
}

// plainErr flattens errors to text: the ends and sentinels are lost.
type plainErr struct{ net.Request }

func (p plainErr) Test() (bool, []int, error) {
	done, sizes, err := p.Request.Test()
	if err != nil {
		err = errors.New(err.Error())
	}
	return done, sizes, err
}

func (p plainErr) Wait(ctx context.Context) ([]int, error) {
	sizes, err := p.Request.Wait(ctx)
	if err != nil {
		err = errors.New(err.Error())
	}
	return sizes, err
}

// TestBrokenProvider runs the suite on a broken provider; it runs only as
// the child process of TestSuiteCatchesBugs, which expects it to fail.
func TestBrokenProvider(t *testing.T) {
	bug := os.Getenv("NETTEST_BUG")
	if bug == "" {
		return
	}
	nettest.Run(t, func(t *testing.T) net.Provider {
		p, err := tcp.New(tcp.Options{IfName: "lo"})
		if err != nil {
			t.Fatal(err)
		}
		return newBroken(p, bug)
	}, nettest.Large(8<<20), nettest.WithoutJunk())
}

// TestSuiteCatchesBugs checks that the suite fails providers that break
// the contract, in the subtest that covers the broken rule.
func TestSuiteCatchesBugs(t *testing.T) {
	for _, tc := range []struct{ bug, fails string }{
		{"FlipsBit", "Ordering"},
		{"IgnoresTags", "MultiRecv"},
		{"LosesAbortError", "Abort"},
		{"TrimsHandle", "GarbageHandles"},
		{"HidesRemote", "PeerDies"},
	} {
		t.Run(tc.bug, func(t *testing.T) {
			linktest.SuiteFails(t, "^TestBrokenProvider$/^"+tc.fails+"$", "NETTEST_BUG="+tc.bug, "TestBrokenProvider/"+tc.fails, "a provider that "+tc.bug)
		})
	}
}

// TestUntouched runs the suite on the same wrapper with no bug, so a
// failure above is the bug's and not the wrapper's.
func TestUntouched(t *testing.T) {
	nettest.Run(t, func(t *testing.T) net.Provider {
		p, err := tcp.New(tcp.Options{IfName: "lo"})
		if err != nil {
			t.Fatal(err)
		}
		return newBroken(p, "")
	}, nettest.Large(8<<20), nettest.WithoutJunk())
}
