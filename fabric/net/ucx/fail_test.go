package ucx

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
)

var errTest = errors.New("test abort")

// TestAbortInFlight aborts one side with requests in flight on it: they
// fail with the abort error (naming the device), later ones too, and the
// peer's requests fail with ErrAborted once the notice arrives.
func TestAbortInFlight(t *testing.T) {
	for _, side := range []string{"sender", "receiver"} {
		t.Run(side, func(t *testing.T) {
			a, b := open(t), open(t)
			s, r := pair(t, a, b)
			var mine []fnet.Request
			for i := 0; i < 3; i++ {
				var q fnet.Request
				var err error
				if side == "sender" { // no receive posted: a sync send stays in flight
					q, err = s.ISend(make([]byte, []int{10, 8 << 20, 0}[i]), 1, nil)
				} else {
					q, err = r.IRecv([][]byte{make([]byte, 8), make([]byte, 8<<20)}, []uint64{5, 6}, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				mine = append(mine, q)
			}
			if side == "sender" {
				s.Abort(errTest)
			} else {
				r.Abort(errTest)
			}
			for _, q := range mine {
				if done, _, err := q.Test(); !done || !errors.Is(err, errTest) || !strings.Contains(err.Error(), "/lo") {
					t.Fatalf("aborting side right after Abort: done=%v %v, want the abort error naming the device", done, err)
				}
			}
			// Later requests fail on the aborting side, and the peer's
			// connection fails with ErrAborted and the reason. (After a
			// sender's abort, the receiver may still get the messages that
			// left before it; a fourth receive cannot be satisfied.)
			var later fnet.Request
			var err error
			if side == "sender" {
				later, err = s.ISend([]byte("late"), 1, nil)
			} else {
				later, err = r.IRecv([][]byte{make([]byte, 8)}, []uint64{1}, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := waitErr(t, later); !errors.Is(err, errTest) {
				t.Fatalf("request after abort: %v", err)
			}
			var peer []fnet.Request
			for i := 0; i < 4; i++ {
				var q fnet.Request
				if side == "sender" {
					q, err = r.IRecv([][]byte{make([]byte, 8<<20)}, []uint64{1}, nil)
				} else {
					q, err = s.ISend([]byte("late"), 1, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				peer = append(peer, q)
			}
			for i, q := range peer {
				_, err := q.Wait(ctxT(t, 30*time.Second))
				if (err != nil || i == len(peer)-1) && (!errors.Is(err, errs.ErrAborted) || !strings.Contains(err.Error(), errTest.Error())) {
					t.Fatalf("peer's request %d: %v, want ErrAborted with the reason", i, err)
				}
			}
		})
	}
}

// TestPeerClose: the sender closes after its sends completed; receives for
// messages never sent fail with ErrPeerLost, and those sent are delivered.
func TestPeerClose(t *testing.T) {
	a, b := open(t), open(t)
	s, r := pair(t, a, b)
	dst := make([]byte, 4<<20)
	got := recv1(t, r, dst, 1)
	if _, err := wait1(s.ISend(pattern(make([]byte, 4<<20), 1), 1, nil)); err != nil {
		t.Fatal(err)
	}
	late, err := r.IRecv([][]byte{make([]byte, 8)}, []uint64{2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if n := wait(t, got); n[0] != 4<<20 {
		t.Fatalf("delivered %v", n)
	}
	if err := waitErr(t, late); !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("receive after the sender closed: %v, want ErrPeerLost", err)
	}
}

// TestProviderClose fails pending requests of both ends' connections.
func TestProviderClose(t *testing.T) {
	a, b := open(t), open(t)
	s, r := pair(t, a, b)
	rq, err := r.IRecv([][]byte{make([]byte, 8)}, []uint64{2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sq, err := s.ISend(make([]byte, 8<<20), 3, nil) // unmatched: stays in flight
	if err != nil {
		t.Fatal(err)
	}
	_ = rq
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, sq); !errors.Is(err, errs.ErrClosed) {
		t.Fatalf("send on a closed provider: %v, want ErrClosed", err)
	}
	if err := waitErr(t, rq); !errors.Is(err, errs.ErrPeerLost) && !errors.Is(err, errs.ErrMismatch) {
		t.Fatalf("receive whose sender's provider closed: %v", err)
	}
	if _, err := a.Listen(ctxT(t, time.Second), 0); !errors.Is(err, errs.ErrClosed) {
		t.Fatalf("listen after close: %v", err)
	}
	if q, err := s.ISend(nil, 1, nil); err == nil {
		if err = waitErr(t, q); !errors.Is(err, errs.ErrClosed) {
			t.Fatalf("send after close: %v", err)
		}
	}
}

func TestGarbageHandles(t *testing.T) {
	a := open(t)
	for _, h := range [][]byte{
		nil,
		[]byte("short"),
		make([]byte, 20),
		append([]byte("FXUC\x02\x04"), make([]byte, 14)...),         // version 2
		append([]byte("FXUC\x01\x05"), make([]byte, 15)...),         // ip length 5
		append([]byte("FXUC\x01\x04\x00\x00"), make([]byte, 12)...), // port 0
		make([]byte, fnet.MaxHandleBytes+1),
	} {
		_, err := a.Connect(ctxT(t, 5*time.Second), loDev(t, a), h)
		if !errors.Is(err, fnet.ErrBadHandle) {
			t.Errorf("handle %q: %v, want ErrBadHandle", h, err)
		}
	}
}

// TestGarbageOnListener: connections that send junk or nothing are dropped
// and Accept still returns the next real connection.
func TestGarbageOnListener(t *testing.T) {
	a, b := open(t), open(t)
	ctx := ctxT(t, 20*time.Second)
	l, err := b.Listen(ctx, loDev(t, b))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hd, _ := decodeHandle(l.Handle())
	for _, junk := range []string{"GET / HTTP/1.0\r\n\r\n", "FXUH\x01" + "wrongnce" + "\x00", ""} {
		c, err := net.Dial("tcp", hd.addr.String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(junk))
		if junk != "" { // the listener hangs up on junk
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := bufio.NewReader(c).ReadByte(); err == nil {
				t.Fatalf("listener answered junk %q", junk)
			}
		}
		c.Close()
	}
	// A stale handle (right address, wrong nonce) is refused.
	stale := handle{addr: hd.addr, nonce: hd.nonce + 1}.encode()
	if _, err := a.Connect(ctx, loDev(t, a), stale); err == nil {
		t.Fatal("connect with a stale nonce succeeded")
	}
	s, err := a.Connect(ctx, loDev(t, a), l.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dst := make([]byte, 5)
	rq := recv1(t, r, dst, 4)
	if _, err := wait1(s.ISend([]byte("hello"), 4, nil)); err != nil {
		t.Fatal(err)
	}
	if wait(t, rq); string(dst) != "hello" {
		t.Fatalf("got %q", dst)
	}
}

// connectTo is a's Connect to a ucx handle naming ln's address (nonce 1),
// which is expected to fail: its error.
func connectTo(t *testing.T, a *Provider, ln net.Listener) error {
	t.Helper()
	h := handle{nonce: 1, addr: mustAddrPort(t, "127.0.0.1", ln.Addr().(*net.TCPAddr).Port)}
	s, err := a.Connect(ctxT(t, 5*time.Second), loDev(t, a), h.encode())
	if err == nil {
		s.Close()
	}
	return err
}

func TestConnectRefused(t *testing.T) {
	a := open(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	err = connectTo(t, a, ln)
	var ce *fnet.ConnError
	if !errors.As(err, &ce) || ce.Op != "connect" || ce.Remote == "" {
		t.Fatalf("connect to nothing: %v", err)
	}
	if !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("connect to nothing: %v, want an error wrapping ErrPeerLost (the peer's listener is gone)", err)
	}
}

// TestListenerClosedBeforeAnswerIsPeerLost: a listener that takes the
// connection and closes it without a reply (its process died as it was
// dialed, as the kernel closes its sockets) is a lost peer, as with tcp.
func TestListenerClosedBeforeAnswerIsPeerLost(t *testing.T) {
	a := open(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
	}()
	if err := connectTo(t, a, ln); !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("connect to a listener that hangs up: %v, want an error wrapping ErrPeerLost", err)
	}
}
