package multilink

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestLateDuplicateAfterDone: a duplicate of a part that was staged while
// the first copy was being written, and whose payload lands only after the
// message completed, must not touch the buffer the caller has back.
func TestLateDuplicateAfterDone(t *testing.T) {
	nw := fake.NewNetwork(2, fake.Options{})
	c := New(0, []fabric.Link{nw.Link(1, 0)}, nil, Options{}).(*channel)
	peer := nw.Link(0, 1)
	t.Cleanup(func() { c.Close(); peer.Close() })
	buf := make([]byte, 64)
	req := c.Recv(fabric.Tag{}, buf)
	h := header{kind: kindPart, seq: 0, total: len(buf), off: 0, len: len(buf)}
	dst, first, ok := (&reader{c: c}).place(h)
	if !ok || first.kind != direct {
		t.Fatalf("first copy placed %v (ok %v), want direct", first.kind, ok)
	}
	dup, second, ok := (&reader{c: c}).place(h)
	if !ok || second.kind != stage {
		t.Fatalf("second copy placed %v (ok %v), want staged", second.kind, ok)
	}
	copy(dst, bytes.Repeat([]byte{7}, len(buf)))
	(&reader{c: c, j: 0}).arrived(first, h, dst)
	select {
	case <-req.Done():
	default:
		t.Fatal("the receive did not complete with every byte in place")
	}
	clear(buf) // the caller owns buf again
	copy(dup, bytes.Repeat([]byte{9}, len(dup)))
	(&reader{c: c, j: 0}).arrived(second, h, dup)
	if !bytes.Equal(buf, make([]byte, len(buf))) {
		t.Fatal("a late duplicate wrote into the buffer of a completed receive")
	}
}

// TestAckForPartNeverSent: an ack whose range matches no part sent is a
// corrupt stream: the link it came on is dropped and reported.
func TestAckForPartNeverSent(t *testing.T) {
	nw := fake.NewNetwork(2, fake.Options{})
	failed := make(chan error, 1)
	c := New(1, []fabric.Link{nw.Link(0, 1)}, nil, Options{OnLinkFailure: func(_ int, _ fabric.Kind, err error) {
		select {
		case failed <- err:
		default:
		}
	}}).(*channel)
	peer := nw.Link(1, 0)
	t.Cleanup(func() { c.Close(); peer.Close() })
	buf := make([]byte, 64<<10)
	c.Send(fabric.Tag{}, buf)
	c.ackArrived(0, header{kind: kindAck, seq: 0, total: len(buf), off: 1, len: 3})
	c.mu.Lock()
	dead := c.st.dead[0]
	c.mu.Unlock()
	if !dead {
		t.Fatal("an ack for bytes never sent was accepted")
	}
	select { // OnLinkFailure runs on a goroutine of its own
	case err := <-failed:
		if !errors.Is(err, errs.ErrPeerLost) {
			t.Fatalf("link failure %v, want ErrPeerLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dropped link was not reported")
	}
}
