package fake_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/internal/errs"
)

// TestConformance runs the Link conformance suite over several shapes of
// fake network: ideal, segmented, and timed with jitter and a rate limit.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  fake.Options
	}{
		{"Ideal", fake.Options{}},
		{"Segmented", fake.Options{MaxSegment: 1000}},
		{"Timed", fake.Options{Seed: 3, Latency: 50 * time.Microsecond, Jitter: 200 * time.Microsecond, Bandwidth: 20e9, MaxSegment: 1 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
				nw := fake.NewNetwork(3, tc.opt)
				return nw.Link(2, 0), nw.Link(0, 2)
			})
		})
	}
}

func wait(t *testing.T, r fabric.Request, what string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatalf("%s: still pending after 10s", what)
	}
	return err
}

// TestFailures checks who sees what when a rank dies, a link breaks, the
// job aborts, or one side aborts or closes its link: pending and later
// requests, both directions, on the right ranks only.
func TestFailures(t *testing.T) {
	abortErr := fmt.Errorf("job aborted by rank 1: %w", errs.ErrMismatch)
	for _, tc := range []struct {
		name   string
		fail   func(nw *fake.Network)
		want   [3][3]error // want[a][b]: what a's requests on its link to b fail with (nil: unaffected)
		naming [3][3]string
	}{
		{"Kill", func(nw *fake.Network) { nw.Kill(1) },
			[3][3]error{{nil, errs.ErrPeerLost, nil}, {errs.ErrAborted, nil, errs.ErrAborted}, {nil, errs.ErrPeerLost, nil}},
			[3][3]string{{"", "rank 1", ""}, {"rank (1)", "", "rank (1)"}, {"", "rank 1", ""}}},
		{"FailLink", func(nw *fake.Network) { nw.FailLink(0, 2) },
			[3][3]error{{nil, nil, errs.ErrPeerLost}, {nil, nil, nil}, {errs.ErrPeerLost, nil, nil}},
			[3][3]string{{"", "", "rank 2"}, {"", "", ""}, {"rank 0", "", ""}}},
		{"NetworkAbort", func(nw *fake.Network) { nw.Abort(abortErr) },
			[3][3]error{{nil, errs.ErrMismatch, errs.ErrMismatch}, {errs.ErrMismatch, nil, errs.ErrMismatch}, {errs.ErrMismatch, errs.ErrMismatch, nil}},
			[3][3]string{{"", "rank 1", "rank 1"}, {"rank 1", "", "rank 1"}, {"rank 1", "rank 1", ""}}},
		{"LinkAbort", func(nw *fake.Network) { nw.Link(2, 1).Abort(abortErr) },
			[3][3]error{{nil, nil, nil}, {nil, nil, errs.ErrPeerLost}, {nil, errs.ErrMismatch, nil}},
			[3][3]string{{"", "", ""}, {"", "", "rank 2"}, {"", "rank 1", ""}}},
		{"LinkClose", func(nw *fake.Network) { nw.Link(0, 1).Close() },
			[3][3]error{{nil, errs.ErrClosed, nil}, {errs.ErrPeerLost, nil, nil}, {nil, nil, nil}},
			[3][3]string{{"", "0->1", ""}, {"rank 0", "", ""}, {"", "", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := fake.NewNetwork(3, fake.Options{MaxSegment: 7})
			// A pending receive on every directed link, then the failure,
			// then a later send and receive on every link.
			var pending [3][3]fabric.Request
			for a := range 3 {
				for b := range 3 {
					if a != b {
						pending[a][b] = nw.Link(a, b).Recv(fabric.Tag{1}, make([]byte, 100))
					}
				}
			}
			tc.fail(nw)
			for a := range 3 {
				for b := range 3 {
					if a == b {
						continue
					}
					l := nw.Link(a, b)
					want := tc.want[a][b]
					if want == nil {
						// The link still works: the pending receive takes a message.
						s := nw.Link(b, a).Send(fabric.Tag{1}, make([]byte, 100))
						if err := errors.Join(wait(t, pending[a][b], "recv"), wait(t, s, "send")); err != nil {
							t.Errorf("rank %d <- rank %d on a link that did not fail: %v", a, b, err)
						}
						continue
					}
					for _, r := range []struct {
						what string
						req  fabric.Request
					}{
						{"pending recv", pending[a][b]},
						{"later send", l.Send(fabric.Tag{2}, make([]byte, 10))},
						{"later recv", l.Recv(fabric.Tag{3}, make([]byte, 10))},
					} {
						what := fmt.Sprintf("rank %d's %s from/to rank %d", a, r.what, b)
						err := wait(t, r.req, what)
						if !errors.Is(err, want) {
							t.Errorf("%s: error %v, want one wrapping %v", what, err, want)
						} else if !strings.Contains(err.Error(), tc.naming[a][b]) {
							t.Errorf("%s: error %q does not name %q", what, err, tc.naming[a][b])
						}
					}
				}
			}
			nw.Abort(errors.New("cleanup"))
		})
	}
}

// TestFailMidMessage breaks a link while a segmented, timed message is
// crossing it: both sides fail, and the receive is not reported complete.
func TestFailMidMessage(t *testing.T) {
	nw := fake.NewNetwork(2, fake.Options{Latency: time.Millisecond, MaxSegment: 100, Bandwidth: 1e6})
	msg := linktest.Payload(1, 100_000) // 1000 segments at 1 MB/s: 100 ms
	got := make([]byte, len(msg))
	r := nw.Link(1, 0).Recv(fabric.Tag{5}, got)
	s := nw.Link(0, 1).Send(fabric.Tag{5}, msg)
	nw.Kill(0)
	if err := wait(t, r, "recv"); !errors.Is(err, errs.ErrPeerLost) {
		t.Fatalf("recv while the sender was killed: %v, want ErrPeerLost", err)
	}
	if err := wait(t, s, "send"); !errors.Is(err, errs.ErrAborted) {
		t.Fatalf("send of the killed rank: %v, want ErrAborted", err)
	}
}

// TestTimed checks the time model: a message cannot complete before its
// latency plus its time on the wire, and jitter never reorders messages.
func TestTimed(t *testing.T) {
	const (
		lat = 20 * time.Millisecond
		bw  = 10e6 // 10 MB/s
		n   = 50
	)
	nw := fake.NewNetwork(2, fake.Options{Seed: 9, Latency: lat, Jitter: 5 * time.Millisecond, Bandwidth: bw})
	start := time.Now()
	var sends, recvs []fabric.Request
	var got, msgs [][]byte
	for i := range n {
		msgs = append(msgs, linktest.Payload(uint64(i), 2000)) // 50 × 2000 B = 100 KB: 10 ms on the wire
		got = append(got, make([]byte, 2000))
		sends = append(sends, nw.Link(0, 1).Send(linktest.TagOf(i), msgs[i]))
	}
	for i := range n {
		recvs = append(recvs, nw.Link(1, 0).Recv(linktest.TagOf(i), got[i]))
	}
	for i := range n {
		if err := wait(t, recvs[i], "recv"); err != nil {
			t.Fatalf("recv %d: %v", i, err)
		}
		if string(got[i]) != string(msgs[i]) {
			t.Fatalf("message %d corrupted or reordered", i)
		}
		if err := wait(t, sends[i], "send"); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if el, min := time.Since(start), lat+time.Duration(float64(n*2000)/bw*float64(time.Second)); el < min {
		t.Fatalf("%d messages took %v, faster than latency + wire time %v", n, el, min)
	}
}

// TestOnDeliver checks the hook sees every delivered message once.
func TestOnDeliver(t *testing.T) {
	var count, bytes atomic.Int64
	nw := fake.NewNetwork(2, fake.Options{OnDeliver: func(from, to, n int) {
		if from != 1 || to != 0 {
			t.Errorf("hook called for %d->%d, want 1->0", from, to)
		}
		count.Add(1)
		bytes.Add(int64(n))
	}})
	total := 0
	for i, n := range []int{0, 1, 100, 70000} {
		r := nw.Link(0, 1).Recv(linktest.TagOf(i), make([]byte, n))
		s := nw.Link(1, 0).Send(linktest.TagOf(i), make([]byte, n))
		if err := errors.Join(wait(t, r, "recv"), wait(t, s, "send")); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if count.Load() != 4 || bytes.Load() != int64(total) {
		t.Fatalf("hook saw %d messages, %d bytes; want 4, %d", count.Load(), bytes.Load(), total)
	}
}
