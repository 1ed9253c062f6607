package multilink_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
)

// TestTailFollowsTheFasterLink: the planner believes two links equal
// (frozen clock: it never learns otherwise), but link 0 runs forty times
// faster (the slow link's first part takes about 100 ms: at eight times,
// 21 ms, a loaded machine's scheduling let the slow link ask for a piece
// first). Without a tail each link carries half of a message; with one,
// the pieces of the tail's second half go to the link that completes its
// parts first, so link 0 carries most of them. The bytes arrive exactly either way.
func TestTailFollowsTheFasterLink(t *testing.T) {
	const size = 8 << 20
	for _, tc := range []struct {
		name       string
		tail       float64
		minFast    int // least payload link 0 must carry
		maxFast    int // most
		wantPieces bool
	}{
		{"NoTail", 0, size / 2, size / 2, false},
		// Head 4 MiB, 2 each, then the tail's first half, 1 each; link
		// 0 should take most of the last 2 MiB (all of it: 5 MiB in
		// all; at least 4.75 on a slow machine, where the slow link may
		// complete a part before the fast one asks again).
		{"HalfTail", 0.5, size/2 + 768<<10, size/2 + 1<<20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr traffic
			opts := tr.options(2)
			opts[0].Bandwidth, opts[1].Bandwidth = 800e6, 20e6
			equal := func(links []fabric.Link) *balance.Planner {
				specs := multilink.Specs(links)
				for i := range specs {
					specs[i].Bandwidth = 100e6
				}
				return mustPlanner(t, specs, balance.Config{})
			}
			r := newRig(t, opts, equal, multilink.Options{Now: frozen, Tail: tc.tail})
			msg := linktest.Payload(7, size)
			got := make([]byte, size)
			sendExactly(t, r.a, r.b, msg, got)
			msgs, byts := tr.snapshot()
			payload := [2]int{}
			for i := range payload {
				// every part is a frame plus its payload
				payload[i] = byts[i] - (msgs[i]/2)*frameBytes
			}
			if payload[0]+payload[1] != size {
				t.Fatalf("payload over the links %v sums to %d, want %d", payload, payload[0]+payload[1], size)
			}
			if payload[0] < tc.minFast || payload[0] > tc.maxFast {
				if raceEnabled { // the instrumented copies, not the links' rates, set the pace
					t.Logf("the fast link carried %d bytes (slow: %d), want %d..%d (not enforced under -race)", payload[0], payload[1], tc.minFast, tc.maxFast)
				} else {
					t.Errorf("the fast link carried %d bytes (slow: %d), want %d..%d", payload[0], payload[1], tc.minFast, tc.maxFast)
				}
			}
			if pieces := msgs[0]/2 + msgs[1]/2; (pieces > 2) != tc.wantPieces {
				t.Errorf("%d parts in all (links %v), want more than 2: %v", pieces, msgs, tc.wantPieces)
			}
		})
	}
}

// TestTailLinkFailsWhileHandingOut: one 8 MiB message, half of it a tail,
// over two links; link 1 fails after it delivered the frames of its head
// part and of its share of the tail's first half, while the pieces are
// being handed out. What link 1 lacked goes over link 0 and the message
// arrives exactly; link 1 gets no piece after it failed.
func TestTailLinkFailsWhileHandingOut(t *testing.T) {
	var nets []*fake.Network
	var frames, after atomic.Int64
	var failed atomic.Bool
	opts := []fake.Options{
		{Seed: 1, Latency: 20 * time.Microsecond, Bandwidth: 800e6, MaxSegment: 64 << 10},
		{Seed: 2, Latency: 20 * time.Microsecond, Bandwidth: 400e6, MaxSegment: 64 << 10},
	}
	opts[1].OnDeliver = func(from, to, n int) {
		if from != 0 {
			return
		}
		if failed.Load() {
			after.Add(1)
			return
		}
		if n == frameBytes && frames.Add(1) == 3 { // head, first half, then a piece's frame
			failed.Store(true)
			nets[1].FailLink(0, 1)
		}
	}
	var la, lb []fabric.Link
	for _, o := range opts {
		nw := fake.NewNetwork(2, o)
		nets = append(nets, nw)
		la, lb = append(la, nw.Link(0, 1)), append(lb, nw.Link(1, 0))
	}
	mo := multilink.Options{Now: frozen, Tail: 0.5}
	a, b := multilink.New(1, la, nil, mo), multilink.New(0, lb, nil, mo)
	t.Cleanup(func() { a.Close(); b.Close() })
	const size = 8 << 20
	msg := linktest.Payload(11, size)
	got := make([]byte, size)
	sendExactly(t, a, b, msg, got)
	if !failed.Load() {
		t.Fatalf("link 1 delivered only %d frames; the failure never fired", frames.Load())
	}
	if n := after.Load(); n > 1 {
		t.Fatalf("link 1 delivered %d messages after it failed", n)
	}
}

// TestTailUsesTheMessagesShares: the head and the tail's first half go by
// the shares the planner learnt for the message's size (5 MiB: 3/4 on link
// 0), not by those of the parts' sizes (3.75 MiB and 640 KiB, other size
// classes), which it never saw (its prior: half each).
func TestTailUsesTheMessagesShares(t *testing.T) {
	const size = 5 << 20
	var tr traffic
	learnt := func(links []fabric.Link) *balance.Planner {
		specs := multilink.Specs(links)
		for i := range specs {
			specs[i].Bandwidth = 100e6
		}
		p := mustPlanner(t, specs, balance.Config{})
		for range 50 { // link 0 three times as fast, at this size only
			p.Observe(size, []balance.Observation{
				{Link: 0, Bytes: 3 << 20, Duration: 10 * time.Millisecond},
				{Link: 1, Bytes: 1 << 20, Duration: 10 * time.Millisecond}})
		}
		return p
	}
	r := newRig(t, tr.options(2), learnt, multilink.Options{Now: frozen, Tail: 0.25})
	if s := r.pa.Shares(size); s[0].Fraction < 0.7 {
		t.Fatalf("the planner learnt %v for %d bytes, want about 3/4 on link 0", s, size)
	}
	msg := linktest.Payload(3, size)
	got := make([]byte, size)
	sendExactly(t, r.a, r.b, msg, got)
	msgs, byts := tr.snapshot()
	link0 := byts[0] - (msgs[0]/2)*frameBytes
	// Head 3.75 MiB and first half 0.625 MiB at 3/4: 3.28 MiB on link 0
	// before the last 0.625 MiB is handed out (at half each: 2.19, at
	// most 2.81 in all).
	if link0 < 3<<20 {
		t.Errorf("link 0 carried %d bytes of %d, want at least %d (the learnt shares)", link0, size, 3<<20)
	}
}

// sendExactly sends msg from a to b, received into got, and fails t unless
// both complete and got equals msg.
func sendExactly(t *testing.T, a, b fabric.Link, msg, got []byte) {
	t.Helper()
	rr := b.Recv(linktest.TagOf(len(msg)), got)
	linktest.AwaitOK(t, a.Send(linktest.TagOf(len(msg)), msg), "send")
	linktest.AwaitOK(t, rr, "recv")
	if !bytes.Equal(got, msg) {
		t.Fatal("data differs")
	}
}
