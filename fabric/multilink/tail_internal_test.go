package multilink

import (
	"bytes"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
)

// tailPair is a channel over two timed fake links (so a message is still
// on its way when the test looks) with a quarter tail from 64 KiB, and
// its peer's.
func tailPair(t *testing.T) (a, b *channel) {
	t.Helper()
	var la, lb []fabric.Link
	for i := range 2 {
		nw := fake.NewNetwork(2, fake.Options{Seed: int64(i + 1), Bandwidth: 200e6, MaxSegment: 64 << 10})
		la, lb = append(la, nw.Link(0, 1)), append(lb, nw.Link(1, 0))
	}
	o := Options{Tail: 0.25, TailMin: 64 << 10}
	a, b = New(1, la, nil, o).(*channel), New(0, lb, nil, o).(*channel)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestNextSendFlushesTheTail: a Send sends what is left of the previous
// message's tail before its own head, so no message's bytes wait behind a
// later one's; only the new message keeps a tail.
func TestNextSendFlushesTheTail(t *testing.T) {
	a, b := tailPair(t)
	const size = 4 << 20
	msgs := [][]byte{bytes.Repeat([]byte{1}, size), bytes.Repeat([]byte{2}, size)}
	got := [][]byte{make([]byte, size), make([]byte, size)}
	rr := []fabric.Request{b.Recv(fabric.Tag{}, got[0]), b.Recv(fabric.Tag{}, got[1])}
	s0 := a.Send(fabric.Tag{}, msgs[0])
	a.mu.Lock()
	m0 := a.out.msgs[0]
	if m0 == nil || m0.rest >= size {
		a.mu.Unlock()
		t.Fatal("the first message, 20 ms on the links, has no tail being handed out")
	}
	a.mu.Unlock()
	s1 := a.Send(fabric.Tag{}, msgs[1])
	a.mu.Lock()
	if m0.rest != size {
		t.Errorf("after the next Send the first message has %d bytes of its tail not sent", size-m0.rest)
	}
	if m1 := a.out.msgs[1]; m1 == nil || m1.rest >= size {
		t.Error("the second message is not the one handing out its tail")
	}
	a.mu.Unlock()
	for i, r := range []fabric.Request{s0, s1, rr[0], rr[1]} {
		select {
		case <-r.Done():
			if err := r.Err(); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d still pending after 10 s", i)
		}
	}
	for i := range got {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Fatalf("message %d differs", i)
		}
	}
}

// TestStalledTailSent: when no part of a message is out any more and some
// of its tail is not sent (the links that carried it failed after their
// parts were acknowledged, so no completion will hand it out), the rest
// goes by the shares and the message completes.
func TestStalledTailSent(t *testing.T) {
	a, b := tailPair(t)
	const size = 1 << 20
	msg := bytes.Repeat([]byte{5}, size)
	got := make([]byte, size)
	rr := b.Recv(fabric.Tag{}, got)
	a.mu.Lock()
	m := a.out.add(fabric.Tag{}, msg)
	m.rest = 0 // nothing issued, nothing out: the state a stall leaves
	a.tailStalledLocked(m)
	issued := m.rest
	a.mu.Unlock()
	if issued != size {
		t.Fatalf("%d bytes of the stalled message sent, want all %d", issued, size)
	}
	for _, r := range []fabric.Request{m.req, rr} {
		select {
		case <-r.Done():
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("still pending after 10 s")
		}
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("data differs")
	}
}
