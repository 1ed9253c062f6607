package nettest

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

// bigSend is more than any provider buffers or sends eagerly, so a send of
// it stays in flight until the receiver takes it.
const bigSend = 32 << 20

// testAbort aborts one side of a connection while a send (with no receive
// posted) or a receive (with no send) is in flight. The aborting side's
// requests fail with the abort error, the peer's with ErrPeerLost, both
// within failTimeout, and later requests fail too.
func testAbort(t *testing.T, env func(*testing.T) *Env) {
	for _, c := range []struct {
		name      string
		byRecv    bool // the receiving side aborts
		pendingRx bool // a receive is in flight (else a send)
	}{
		{"SenderWithSendInFlight", false, false},
		{"SenderWithRecvInFlight", false, true},
		{"ReceiverWithSendInFlight", true, false},
		{"ReceiverWithRecvInFlight", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, r := env(t).Pair()
			abortErr := errors.New("nettest: abort " + c.name)
			var pending net.Request
			if c.pendingRx {
				pending = Recv(t, r, [][]byte{make([]byte, 100)}, []uint64{1})
			} else {
				pending = Send(t, s, Pattern(1, bigSend), 1)
			}
			if done, _, err := pending.Test(); done {
				t.Fatalf("request finished before its peer posted anything: %v", err)
			}
			start := time.Now()
			if c.byRecv {
				r.Abort(abortErr)
			} else {
				s.Abort(abortErr)
			}
			// The pending request fails: with abortErr on the aborting
			// side, with ErrPeerLost on the other.
			want := error(errs.ErrPeerLost)
			if c.byRecv == c.pendingRx {
				want = abortErr
			}
			awaitFail(t, pending, want, failTimeout, "request in flight")
			// Later requests fail on both sides.
			wantS, wantR := error(abortErr), error(errs.ErrPeerLost)
			if c.byRecv {
				wantS, wantR = errs.ErrPeerLost, abortErr
			}
			later := Pattern(2, bigSend)
			awaitFail(t, post(s.ISend(later, 2, nil)), wantS, failTimeout, "send after the abort")
			if !c.pendingRx {
				// The receiver still sees the first message: take it, or
				// fail; it must not hang.
				post(r.IRecv([][]byte{make([]byte, bigSend)}, []uint64{1}, nil)).Wait(context.Background())
			}
			awaitFail(t, post(r.IRecv([][]byte{make([]byte, bigSend)}, []uint64{2}, nil)), wantR, failTimeout, "recv after the abort")
			t.Logf("both sides failed %v after the abort", time.Since(start).Round(time.Millisecond))
		})
	}
}

// testGarbageHandles: Connect refuses handles it did not make, with an
// error wrapping ErrBadHandle, without panicking or hanging.
func testGarbageHandles(t *testing.T, e *Env) {
	l, err := e.B.Listen(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	good := l.Handle()
	if len(good) == 0 || len(good) > net.MaxHandleBytes {
		t.Fatalf("handle of %d bytes, want 1..%d", len(good), net.MaxHandleBytes)
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		crand.Read(b)
		return b
	}
	cases := map[string][]byte{
		"Nil":          nil,
		"Empty":        {},
		"OneByte":      {good[0]},
		"Truncated":    good[:len(good)-1],
		"Extended":     append(append([]byte(nil), good...), 0),
		"Random":       random(len(good)),
		"Random129":    random(net.MaxHandleBytes + 1),
		"Random4096":   random(4096),
		"Zeros":        make([]byte, len(good)),
		"HalfOfHandle": good[:len(good)/2],
	}
	for i := 1; i < 8; i++ {
		cases[fmt.Sprintf("Random%d", i*9)] = random(i * 9)
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
			defer cancel()
			s, err := e.A.Connect(ctx, 0, h)
			if err == nil {
				s.Close()
				t.Fatalf("Connect with a %d-byte garbage handle succeeded", len(h))
			}
			if !errors.Is(err, net.ErrBadHandle) {
				t.Fatalf("Connect with a %d-byte garbage handle: error %v, want one wrapping ErrBadHandle", len(h), err)
			}
		})
	}
	if t.Failed() {
		return // a garbage connection may sit in the accept queue
	}
	// The listener still works.
	acc := acceptOne(l)
	checkConn(t, e.A, good, acc)
}

// acceptOne accepts one connection on l in the background (waiting at most
// opTimeout); the channel gets it, or nil when Accept failed.
func acceptOne(l net.Listener) <-chan net.RecvConn {
	acc := make(chan net.RecvConn, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		r, _ := l.Accept(ctx)
		acc <- r
	}()
	return acc
}

// checkConn connects from p to handle, takes the accepted side from acc and
// moves one message.
func checkConn(t *testing.T, p net.Provider, handle []byte, acc <-chan net.RecvConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s, err := p.Connect(ctx, 0, handle)
	if err != nil {
		t.Fatalf("connect with the good handle: %v", err)
	}
	defer s.Close()
	r := <-acc
	if r == nil {
		t.Fatal("accept failed")
	}
	defer r.Close()
	got := make([]byte, 100<<10)
	q := Recv(t, r, [][]byte{got}, []uint64{42})
	AwaitOK(t, Send(t, s, Pattern(42, len(got)), 42), "send over the good connection")
	AwaitOK(t, q, "recv over the good connection")
	Check(t, "message over the good connection", got, 42)
}

// testJunk writes garbage to a listener the way a stray client would; the
// listener must drop it and still accept a good connection (and Accept
// must return that one, not the junk).
func testJunk(t *testing.T, e *Env, junk func(t *testing.T, handle, junk []byte)) {
	if junk == nil {
		t.Fatal("the provider's test gave no Junk writer (pass nettest.Junk): garbage on the listener must be tested")
	}
	l, err := e.B.Listen(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := acceptOne(l)
	for i, n := range []int{0, 1, 7, 64, 65, 1000, 1 << 20} {
		b := Pattern(uint64(i), n)
		junk(t, l.Handle(), b)
	}
	zeros := make([]byte, 4096)
	junk(t, l.Handle(), zeros)
	checkConn(t, e.A, l.Handle(), acc)
}

// testPeerDies closes one side's whole provider while the other side has
// a request in flight: it fails with ErrPeerLost within failTimeout, and
// the error (a *net.ConnError) names the remote end.
func testPeerDies(t *testing.T, env func(*testing.T) *Env) {
	for _, c := range []struct {
		name       string
		senderDies bool
	}{{"Sender", true}, {"Receiver", false}} {
		t.Run(c.name, func(t *testing.T) {
			e := env(t)
			s, r := e.Pair()
			var pending net.Request
			if c.senderDies {
				// One message arrives whole first: the connection works.
				got := make([]byte, 1000)
				q := Recv(t, r, [][]byte{got}, []uint64{1})
				AwaitOK(t, Send(t, s, Pattern(1, len(got)), 1), "send")
				AwaitOK(t, q, "recv")
				pending = Recv(t, r, [][]byte{make([]byte, 10)}, []uint64{2})
				e.A.Close()
			} else {
				pending = Send(t, s, Pattern(1, bigSend), 1)
				e.B.Close()
			}
			err := awaitFail(t, pending, errs.ErrPeerLost, failTimeout, "request in flight when the peer died")
			// The closed provider's own side fails with ErrClosed.
			if c.senderDies {
				awaitFail(t, post(s.ISend(make([]byte, 8), 9, nil)), errs.ErrClosed, failTimeout, "send on the closed provider")
			} else {
				awaitFail(t, post(r.IRecv([][]byte{make([]byte, 8)}, []uint64{9}, nil)), errs.ErrClosed, failTimeout, "recv on the closed provider")
			}
			var ce *net.ConnError
			if !errors.As(err, &ce) || ce.Remote == "" || ce.Device == "" || ce.Provider == "" {
				t.Fatalf("peer loss error %v: want a *net.ConnError naming provider, device and remote", err)
			}
			t.Logf("error: %v", err)
		})
	}
}
