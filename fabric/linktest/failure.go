package linktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// testFullDuplex posts many sends and receives in both directions at once,
// from four goroutines, with more bytes in flight each way than any
// transport buffers, so a link that cannot make progress in one direction
// while the other is blocked deadlocks here.
func testFullDuplex(t *testing.T, mk mkPair) {
	a, b := mk(t)
	const n = 64
	type direction struct {
		from, to     fabric.Link
		msgs, got    [][]byte
		sends, recvs []fabric.Request
	}
	dirs := []*direction{{from: a, to: b}, {from: b, to: a}}
	for d, dir := range dirs {
		dir.msgs, dir.got = make([][]byte, n), make([][]byte, n)
		dir.sends, dir.recvs = make([]fabric.Request, n), make([]fabric.Request, n)
		for i := range n {
			size := (i*7919 + d*131) % (256 << 10)
			switch i % 16 {
			case 3:
				size = 0
			case 5:
				size = 3<<20 + i
			}
			dir.msgs[i] = Payload(uint64(d<<20|i), size)
			dir.got[i] = make([]byte, size)
		}
	}
	var wg sync.WaitGroup
	for d, dir := range dirs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range n {
				dir.sends[i] = dir.from.Send(TagOf(d<<16|i), dir.msgs[i])
			}
		}()
		go func() {
			defer wg.Done()
			for i := range n {
				dir.recvs[i] = dir.to.Recv(TagOf(d<<16|i), dir.got[i])
			}
		}()
	}
	wg.Wait()
	for d, dir := range dirs {
		for i := range n {
			what := fmt.Sprintf("direction %d message %d (%d bytes)", d, i, len(dir.msgs[i]))
			AwaitOK(t, dir.recvs[i], "recv of "+what)
			AwaitOK(t, dir.sends[i], "send of "+what)
			checkData(t, what, dir.got[i], dir.msgs[i])
		}
	}
}

// testWaitDeadline checks that Wait gives up when its context ends, with
// the right error, without cancelling the receive: the message sent
// afterwards still lands in it.
func testWaitDeadline(t *testing.T, mk mkPair) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want []error
	}{
		{"Deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		}, []error{errs.ErrTimeout, context.DeadlineExceeded}},
		{"Cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, []error{context.Canceled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mk(t)
			got := make([]byte, 1000)
			r := b.Recv(TagOf(1), got)
			ctx, cancel := tc.ctx()
			err := r.Wait(ctx)
			cancel()
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Fatalf("Wait with an ended context: error %v, want one wrapping %v", err, w)
				}
			}
			if IsDone(r) || r.Err() != nil {
				t.Fatalf("Wait's context ending finished the receive (err %v); it must stay pending", r.Err())
			}
			msg := Payload(9, len(got))
			s := a.Send(TagOf(1), msg)
			AwaitOK(t, r, "recv after an expired Wait")
			AwaitOK(t, s, "send")
			checkData(t, "message", got, msg)
		})
	}
}

// awaitFailure waits for r to fail with an error wrapping want, within
// limit.
func awaitFailure(t *testing.T, r fabric.Request, want error, limit time.Duration, what string) {
	t.Helper()
	if err := awaitWithin(t, r, limit, what); !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, want)
	}
}

func testAbort(t *testing.T, mk mkPair) {
	a, _ := mk(t)
	abortErr := errors.New("linktest: abort")
	r := a.Recv(TagOf(1), make([]byte, 10))
	s := a.Send(TagOf(2), Payload(3, 32<<20)) // more than a transport buffers
	a.Abort(abortErr)
	awaitFailure(t, r, abortErr, opTimeout, "pending recv after Abort")
	if err := Await(t, s, "pending send after Abort"); err != nil && !errors.Is(err, abortErr) {
		t.Fatalf("pending send after Abort: error %v, want nil (finished first) or one wrapping the abort error", err)
	}
	awaitFailure(t, a.Send(TagOf(3), []byte{1}), abortErr, opTimeout, "send after Abort")
	awaitFailure(t, a.Recv(TagOf(4), make([]byte, 1)), abortErr, opTimeout, "recv after Abort")
}

func testClose(t *testing.T, mk mkPair) {
	a, _ := mk(t)
	r := a.Recv(TagOf(1), make([]byte, 10))
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	awaitFailure(t, r, errs.ErrClosed, opTimeout, "pending recv after Close")
	awaitFailure(t, a.Send(TagOf(2), []byte{1}), errs.ErrClosed, opTimeout, "send after Close")
	awaitFailure(t, a.Recv(TagOf(3), make([]byte, 1)), errs.ErrClosed, opTimeout, "recv after Close")
	a.Close() // a second Close must not panic or hang
}

func testPeerClose(t *testing.T, mk mkPair) {
	a, b := mk(t)
	r := b.Recv(TagOf(1), make([]byte, 10))
	s := b.Send(TagOf(2), Payload(4, 32<<20)) // more than a transport buffers
	a.Close()
	awaitFailure(t, r, errs.ErrPeerLost, lossTimeout, "pending recv after the peer closed")
	ctx, cancel := context.WithTimeout(context.Background(), lossTimeout)
	defer cancel()
	if err := s.Wait(ctx); ctx.Err() != nil || (err != nil && !errors.Is(err, errs.ErrPeerLost)) {
		t.Fatalf("pending send after the peer closed: error %v (context %v), want nil or one wrapping ErrPeerLost within %v",
			err, ctx.Err(), lossTimeout)
	}
	awaitFailure(t, b.Send(TagOf(3), []byte{1}), errs.ErrPeerLost, lossTimeout, "send after the peer closed")
	awaitFailure(t, b.Recv(TagOf(4), make([]byte, 1)), errs.ErrPeerLost, lossTimeout, "recv after the peer closed")
}
