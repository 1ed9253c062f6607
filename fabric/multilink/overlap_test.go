package multilink

import (
	"bytes"
	"errors"
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
)

// TestDuplicateWaitsForRange: a part sent again after a link failure can
// arrive over another link while the first copy is still being received
// into the caller's buffer. The second copy must not be written into a
// range a link still owns: it is staged and held, and copied in once the
// first copy is done (when that one failed, its bytes are needed).
func TestDuplicateWaitsForRange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		firstFail bool
	}{{"FirstCopyCompletes", false}, {"FirstCopyFails", true}} {
		t.Run(tc.name, func(t *testing.T) {
			nw0, nw1 := fake.NewNetwork(2, fake.Options{}), fake.NewNetwork(2, fake.Options{})
			c := New(0, []fabric.Link{nw0.Link(1, 0), nw1.Link(1, 0)}, nil, Options{}).(*channel)
			t.Cleanup(func() { c.Close() })
			want := linktest.Payload(1, 10000)
			buf := make([]byte, len(want))
			recv := c.Recv(linktest.TagOf(1), buf)
			h := header{total: len(want), off: 1000, len: 9000, tag: linktest.TagOf(1)}
			rest := header{total: len(want), len: 1000, tag: linktest.TagOf(1)}

			first, pl1, _ := (&reader{c: c}).place(h) // over link 1
			dup, pl2, _ := (&reader{c: c}).place(h)   // the same part again, over link 0
			if pl1.kind != direct || pl2.kind != stage {
				t.Fatalf("placements %d and %d, want direct (%d) then staged (%d)", pl1.kind, pl2.kind, direct, stage)
			}
			copy(dup, want[h.off:])
			(&reader{c: c, j: 0}).arrived(pl2, h, dup)
			dst, pl, _ := (&reader{c: c}).place(rest)
			copy(dst, want)
			(&reader{c: c, j: 0}).arrived(pl, rest, dst)
			c.mu.Lock()
			held := len(c.in.msgs[0].held)
			c.mu.Unlock()
			if held != 1 || recv.Err() != nil || linktest.IsDone(recv) || !bytes.Equal(buf[h.off:], make([]byte, h.len)) {
				t.Fatalf("duplicate: %d held, receive done %v, or copied into a range link 1 still owns", held, linktest.IsDone(recv))
			}

			if tc.firstFail {
				(&reader{c: c, j: 1}).failed(pl1, h, errors.New("link 1 broke"))
			} else {
				copy(first, want[h.off:])
				(&reader{c: c, j: 1}).arrived(pl1, h, first)
			}
			linktest.AwaitOK(t, recv, "recv")
			if !bytes.Equal(buf, want) {
				t.Fatal("received bytes differ from the source buffer")
			}
		})
	}
}
