package multilink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
	"github.com/flexlink/flexlink/internal/errs"
)

const frameBytes = 4096 // multilink's default frame size

// failureLog collects OnLinkFailure reports.
type failureLog struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{}
}

func newFailureLog() *failureLog { return &failureLog{ch: make(chan struct{}, 64)} }

func (f *failureLog) report(side string) func(int, fabric.Kind, error) {
	return func(link int, kind fabric.Kind, err error) {
		f.mu.Lock()
		f.got = append(f.got, fmt.Sprintf("%s:%d", side, link))
		f.mu.Unlock()
		if !errors.Is(err, errs.ErrPeerLost) {
			panic(fmt.Sprintf("link %d failure reported with %v, want an error wrapping ErrPeerLost", link, err))
		}
		f.ch <- struct{}{}
	}
}

// await waits for n reports and returns them all, sorted by arrival.
func (f *failureLog) await(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		select {
		case <-f.ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %v link failures reported after 10s, want %d", f.got, n)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// TestLinkFailsMidTransfer breaks one link just after it delivered the
// frame of a part and before the part's payload: that part is lost in the
// middle, must be sent again over the other links, and every message must
// still arrive exactly. The link is then excluded: it carries nothing more.
func TestLinkFailsMidTransfer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		link      int     // which link fails
		afterPart int     // after how many of its frames
		tail      float64 // Options.Tail: parts of the tail in flight fail too
	}{
		{"FastestLink", 0, 5, 0},
		{"MiddleLink", 1, 3, 0},
		{"SlowestLink", 2, 8, 0},
		{"FastestLinkTail", 0, 5, 0.25},
		{"MiddleLinkTail", 1, 9, 0.25},
		{"SlowestLinkTail", 2, 14, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nets []*fake.Network
			var frames, after atomic.Int64 // a->b frames on the link; deliveries after the failure
			var failed atomic.Bool
			opts := []fake.Options{
				{Seed: 1, Latency: 20 * time.Microsecond, Bandwidth: 4e9, MaxSegment: 64 << 10},
				{Seed: 2, Latency: 20 * time.Microsecond, Bandwidth: 1e9, MaxSegment: 64 << 10},
				{Seed: 3, Latency: 20 * time.Microsecond, Bandwidth: 0.5e9, MaxSegment: 64 << 10},
			}
			opts[tc.link].OnDeliver = func(from, to, n int) {
				if from != 0 {
					return
				}
				if failed.Load() {
					after.Add(1)
					return
				}
				if n == frameBytes && frames.Add(1) == int64(tc.afterPart) {
					failed.Store(true)
					nets[tc.link].FailLink(0, 1)
				}
			}
			log := newFailureLog()
			r := newRigWithFailures(t, opts, log, &nets, tc.tail)
			stream(t, r, 30, 1<<20+333, 3, 7) // odd size: an unaligned tail part
			if !failed.Load() {
				t.Fatalf("link %d carried only %d frames; the failure never fired", tc.link, frames.Load())
			}
			got := log.await(t, 2)
			want := []string{fmt.Sprintf("a:%d", tc.link), fmt.Sprintf("b:%d", tc.link)}
			if len(got) != 2 || !(got[0] == want[0] && got[1] == want[1] || got[0] == want[1] && got[1] == want[0]) {
				t.Fatalf("failures reported %v, want %v (each side once)", got, want)
			}
			if !r.pa.Excluded(tc.link) {
				t.Fatalf("sender's planner still uses failed link %d", tc.link)
			}
			// One message whose delivery was already under way when the link
			// failed may still land (the fake delivers segments concurrently);
			// a link still in use would carry many more.
			if n := after.Load(); n > 1 {
				t.Fatalf("failed link %d delivered %d messages after it failed", tc.link, n)
			}
			if d := r.a.Props().Desc; !strings.Contains(d, fmt.Sprintf("%d fake: ", tc.link)) || !strings.Contains(d, "(failed)") {
				t.Fatalf("Props().Desc %q does not mark link %d failed", d, tc.link)
			}
			before := after.Load()
			stream(t, r, 5, 3<<20, 2, 99) // and it carries on, without the failed link
			if n := after.Load() - before; n != 0 {
				t.Fatalf("failed link %d carried %d messages of later transfers", tc.link, n)
			}
		})
	}
}

func newRigWithFailures(t *testing.T, opts []fake.Options, log *failureLog, nets *[]*fake.Network, tail float64) *rig {
	t.Helper()
	var la, lb []fabric.Link
	r := &rig{}
	for _, o := range opts {
		nw := fake.NewNetwork(2, o)
		r.nets = append(r.nets, nw)
		la, lb = append(la, nw.Link(0, 1)), append(lb, nw.Link(1, 0))
	}
	*nets = r.nets
	r.pa = mustPlanner(t, multilink.Specs(la), balance.Config{})
	// A frozen clock keeps the planner at its priors, so every link carries
	// a part of every message and the failure fires where the table says;
	// under the real clock, noisy timings on a busy machine sometimes
	// starved the slowest link of the frames it was to fail after.
	r.a = multilink.New(1, la, r.pa, multilink.Options{Now: frozen, OnLinkFailure: log.report("a"), Tail: tail, TailMin: 64 << 10})
	r.b = multilink.New(0, lb, nil, multilink.Options{Now: frozen, OnLinkFailure: log.report("b"), Tail: tail, TailMin: 64 << 10})
	t.Cleanup(func() { r.a.Close(); r.b.Close() })
	return r
}

// TestAllLinksFail: when the last link goes, pending and later requests
// fail with ErrPeerLost naming the peer; nothing hangs.
func TestAllLinksFail(t *testing.T) {
	var nets []*fake.Network
	opts := []fake.Options{
		{Latency: 50 * time.Microsecond, Bandwidth: 1e9, MaxSegment: 64 << 10},
		{Latency: 50 * time.Microsecond, Bandwidth: 1e9, MaxSegment: 64 << 10},
	}
	log := newFailureLog()
	r := newRigWithFailures(t, opts, log, &nets, 0)
	msg := linktest.Payload(1, 8<<20)
	got := make([]byte, len(msg))
	recv := r.b.Recv(linktest.TagOf(1), got)
	send := r.a.Send(linktest.TagOf(1), msg)
	nets[0].FailLink(0, 1)
	nets[1].FailLink(0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, x := range []struct {
		what string
		req  fabric.Request
	}{
		{"pending recv", recv}, {"pending send", send},
		{"later send", r.a.Send(linktest.TagOf(2), []byte{1})},
		{"later recv", r.b.Recv(linktest.TagOf(2), make([]byte, 1))},
	} {
		err := x.req.Wait(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s still pending 5s after every link failed", x.what)
		}
		if !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "rank") {
			t.Fatalf("%s: error %v, want one wrapping ErrPeerLost that names the rank", x.what, err)
		}
	}
	if got := log.await(t, 4); len(got) != 4 {
		t.Fatalf("failures reported %v, want both links on both sides", got)
	}
}
