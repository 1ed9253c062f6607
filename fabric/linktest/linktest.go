// Package linktest is the conformance suite every fabric.Link passes. A
// transport's tests call Run with a function that makes a fresh connected
// pair of links; the suite checks the Link contract (fabric/link.go) on it:
// FIFO order, tag and size checks, zero-length and large messages, full
// duplex traffic, Wait deadlines, Abort, Close and peer loss.
//
// The suite depends only on the fabric package so that every transport,
// including the in-memory fake, can use it.
package linktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/flexlink/flexlink/internal/testenv"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

const (
	// opTimeout bounds every wait for an operation that must complete; a
	// link that needs longer is broken (or the machine is hopelessly busy).
	opTimeout = 30 * time.Second
	// lossTimeout is how quickly peer loss must be reported (the contract of
	// every real transport).
	lossTimeout = 2 * time.Second
	// eagerGrace is how long RecvAfterSend lets a send complete on its own
	// before posting the receive. Eager transports finish small sends in
	// that time; rendezvous transports do not, and both are allowed, so no
	// assertion depends on it.
	eagerGrace = 20 * time.Millisecond
)

// Run runs the suite. mk is called once per subtest (sometimes once per
// table row) and returns two connected links: a's peer is b's rank and b's
// peer is a's rank. Run closes both links when the subtest ends; mk may
// register further cleanup with t.Cleanup.
func Run(t *testing.T, mk func(t *testing.T) (a, b fabric.Link)) {
	pair := func(t *testing.T) (fabric.Link, fabric.Link) {
		t.Helper()
		a, b := mk(t)
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	t.Run("Props", func(t *testing.T) { testProps(t, pair) })
	t.Run("FIFO", func(t *testing.T) { testFIFO(t, pair) })
	t.Run("TagMismatch", func(t *testing.T) { testTagMismatch(t, pair) })
	t.Run("SizeMismatch", func(t *testing.T) { testSizeMismatch(t, pair) })
	t.Run("ZeroLength", func(t *testing.T) { testZeroLength(t, pair) })
	t.Run("Sizes", func(t *testing.T) { testSizes(t, pair) })
	t.Run("RecvBeforeSend", func(t *testing.T) { testOrderOfPosting(t, pair, true) })
	t.Run("RecvAfterSend", func(t *testing.T) { testOrderOfPosting(t, pair, false) })
	t.Run("FullDuplex", func(t *testing.T) { testFullDuplex(t, pair) })
	t.Run("WaitDeadline", func(t *testing.T) { testWaitDeadline(t, pair) })
	t.Run("Abort", func(t *testing.T) { testAbort(t, pair) })
	t.Run("Close", func(t *testing.T) { testClose(t, pair) })
	t.Run("PeerClose", func(t *testing.T) { testPeerClose(t, pair) })
}

type mkPair = func(t *testing.T) (fabric.Link, fabric.Link)

// Payload returns n pseudo-random bytes determined by seed
// (testenv.Payload).
func Payload(seed uint64, n int) []byte { return testenv.Payload(seed, n) }

// TagOf returns a tag whose four words all depend on i, so a transport that
// drops or swaps any word of a tag is caught.
func TagOf(i int) fabric.Tag {
	u := uint64(i)
	return fabric.Tag{u + 1, ^u, u<<32 | 0xabc, u * 0x9e3779b97f4a7c15}
}

// Await waits for r to finish (failing the test if it does not within
// opTimeout) and returns its error.
func Await(t testing.TB, r fabric.Request, what string) error {
	t.Helper()
	return awaitWithin(t, r, opTimeout, what)
}

// awaitWithin waits for r to finish, failing the test if it does not
// within limit, and returns its error.
func awaitWithin(t testing.TB, r fabric.Request, limit time.Duration, what string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err := r.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatalf("%s: not done after %v", what, limit)
	}
	return err
}

// AwaitOK waits for r and fails the test unless it succeeded.
func AwaitOK(t testing.TB, r fabric.Request, what string) {
	t.Helper()
	if err := Await(t, r, what); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// IsDone reports, without waiting, whether r has completed.
func IsDone(r fabric.Request) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// checkData fails the test unless got equals want, naming the first
// differing byte.
func checkData(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%s: got %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d of %d is %#x, want %#x", what, i, len(got), got[i], want[i])
		}
	}
}

func testProps(t *testing.T, mk mkPair) {
	a, b := mk(t)
	if a.Peer() == b.Peer() || a.Peer() < 0 || b.Peer() < 0 {
		t.Fatalf("peers: a.Peer()=%d b.Peer()=%d, want two distinct ranks", a.Peer(), b.Peer())
	}
	for _, l := range []fabric.Link{a, b} {
		p := l.Props()
		if p.Kind == "" || p.Desc == "" {
			t.Errorf("link to rank %d: Props %+v lack Kind or Desc", l.Peer(), p)
		}
	}
	if a.Props().Kind != b.Props().Kind {
		t.Errorf("kinds differ: %q and %q", a.Props().Kind, b.Props().Kind)
	}
}

// testFIFO sends many messages of varied sizes with distinct tags and
// receives them in order; any reordering shows as a tag mismatch or wrong
// data.
func testFIFO(t *testing.T, mk mkPair) {
	for _, tc := range []struct {
		name      string
		recvFirst bool
	}{{"SendsFirst", false}, {"RecvsFirst", true}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mk(t)
			const n = 200
			msgs := make([][]byte, n)
			for i := range msgs {
				msgs[i] = Payload(uint64(i), (i*37)%300)
			}
			got := make([][]byte, n)
			var sends, recvs []fabric.Request
			postSends := func() {
				for i, m := range msgs {
					sends = append(sends, a.Send(TagOf(i), m))
				}
			}
			postRecvs := func() {
				for i, m := range msgs {
					got[i] = make([]byte, len(m))
					recvs = append(recvs, b.Recv(TagOf(i), got[i]))
				}
			}
			if tc.recvFirst {
				postRecvs()
				postSends()
			} else {
				postSends()
				postRecvs()
			}
			for i := range msgs {
				AwaitOK(t, recvs[i], fmt.Sprintf("recv %d", i))
				checkData(t, fmt.Sprintf("message %d", i), got[i], msgs[i])
			}
			for i := range sends {
				AwaitOK(t, sends[i], fmt.Sprintf("send %d", i))
			}
		})
	}
}

func testTagMismatch(t *testing.T, mk mkPair) {
	sent := TagOf(7)
	for w := range sent {
		t.Run(fmt.Sprintf("Word%d", w), func(t *testing.T) {
			a, b := mk(t)
			want := sent
			want[w] ^= 1 << (w * 9)
			s := a.Send(sent, Payload(1, 64))
			r := b.Recv(want, make([]byte, 64))
			err := Await(t, r, "recv with wrong tag")
			tm, ok := fabric.AsTagMismatch(err)
			if !ok || !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("recv error %v: want a *fabric.TagMismatchError wrapping ErrMismatch", err)
			}
			if tm.Want != want || tm.Got != sent || tm.Peer != b.Peer() {
				t.Fatalf("mismatch error says peer %d want %x got %x; expected peer %d want %x got %x",
					tm.Peer, tm.Want, tm.Got, b.Peer(), want, sent)
			}
			Await(t, s, "send of the mismatched message") // it must finish; its outcome is not specified
		})
	}
}

func testSizeMismatch(t *testing.T, mk mkPair) {
	for _, tc := range []struct{ send, recv int }{
		{16, 15}, {16, 17}, {0, 1}, {1, 0}, {1 << 20, 1<<20 - 1}, {1 << 20, 1<<20 + 1},
	} {
		t.Run(fmt.Sprintf("%dto%d", tc.send, tc.recv), func(t *testing.T) {
			a, b := mk(t)
			s := a.Send(TagOf(1), Payload(2, tc.send))
			r := b.Recv(TagOf(1), make([]byte, tc.recv))
			err := Await(t, r, "recv of the wrong size")
			if !errors.Is(err, errs.ErrMismatch) {
				t.Fatalf("recv of %d bytes for a %d-byte message: error %v, want one wrapping ErrMismatch", tc.recv, tc.send, err)
			}
			if _, ok := fabric.AsTagMismatch(err); ok {
				t.Fatalf("size mismatch reported as a tag mismatch: %v", err)
			}
			AwaitOK(t, s, "send of the mismatched message")
		})
	}
}

// testZeroLength interleaves empty messages with others so that a framing
// error around an empty payload shows in the neighbours' data.
func testZeroLength(t *testing.T, mk mkPair) {
	a, b := mk(t)
	sizes := []int{0, 5, 0, 0, 3, 0}
	for i, n := range sizes {
		var msg []byte
		if n > 0 || i%2 == 1 {
			msg = Payload(uint64(i), n) // non-nil empty slice for odd i
		}
		s := a.Send(TagOf(i), msg)
		got := make([]byte, n)
		if n == 0 && i%2 == 0 {
			got = nil
		}
		r := b.Recv(TagOf(i), got)
		AwaitOK(t, r, fmt.Sprintf("recv %d (%d bytes)", i, n))
		AwaitOK(t, s, fmt.Sprintf("send %d (%d bytes)", i, n))
		checkData(t, fmt.Sprintf("message %d", i), got, msg)
	}
	// A zero-length receive still checks the tag.
	s := a.Send(TagOf(100), nil)
	if _, ok := fabric.AsTagMismatch(Await(t, b.Recv(TagOf(101), nil), "empty recv with wrong tag")); !ok {
		t.Fatal("empty message with a wrong tag was accepted")
	}
	Await(t, s, "empty send")
}

func testSizes(t *testing.T, mk mkPair) {
	a, b := mk(t)
	sizes := []int{1, 2, 7, 63, 64, 65, 4095, 4096, 4097, 65537, 1 << 20, 4<<20 + 5, 64<<20 + 3}
	for i, n := range sizes {
		msg := Payload(uint64(n), n)
		got := make([]byte, n)
		r := b.Recv(TagOf(i), got)
		s := a.Send(TagOf(i), msg)
		AwaitOK(t, r, fmt.Sprintf("recv of %d bytes", n))
		AwaitOK(t, s, fmt.Sprintf("send of %d bytes", n))
		checkData(t, fmt.Sprintf("%d-byte message", n), got, msg)
	}
}

func testOrderOfPosting(t *testing.T, mk mkPair, recvFirst bool) {
	a, b := mk(t)
	for i, n := range []int{0, 100, 1<<20 + 1, 9 << 20} {
		msg := Payload(uint64(i), n)
		got := make([]byte, n)
		var s, r fabric.Request
		if recvFirst {
			r = b.Recv(TagOf(i), got)
			if IsDone(r) {
				t.Fatalf("recv %d finished before any message was sent: %v", i, r.Err())
			}
			s = a.Send(TagOf(i), msg)
		} else {
			s = a.Send(TagOf(i), msg)
			select {
			case <-s.Done():
			case <-time.After(eagerGrace):
			}
			r = b.Recv(TagOf(i), got)
		}
		AwaitOK(t, r, fmt.Sprintf("recv of %d bytes", n))
		AwaitOK(t, s, fmt.Sprintf("send of %d bytes", n))
		checkData(t, fmt.Sprintf("%d-byte message", n), got, msg)
	}
}
