package multilink_test

import (
	"math"
	"sync"
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
)

// TestOnShares: the channel reports the balancer's shares when a size
// class is first used and when they move, not per message; every report
// is what the planner holds at that moment, and the shares in force at
// the end are the last ones reported (give or take two points).
func TestOnShares(t *testing.T) {
	type report struct {
		bytes  int
		shares []balance.Share
	}
	var (
		mu      sync.Mutex
		reports []report
		r       *rig
	)
	mo := multilink.Options{OnShares: func(bytes int, shares []balance.Share) {
		mu.Lock()
		defer mu.Unlock()
		if want := r.pa.Shares(bytes); !balance.SameShares(want, shares, 1e-12) {
			t.Errorf("reported %v, planner holds %v", shares, want)
		}
		reports = append(reports, report{bytes, append([]balance.Share(nil), shares...)})
	}}
	opts := []fake.Options{{Bandwidth: 4e9}, {Bandwidth: 1e9}}
	r = newRig(t, opts, func(links []fabric.Link) *balance.Planner {
		return mustPlanner(t, multilink.Specs(links), balance.DefaultConfig())
	}, mo)
	const size, msgs = 1 << 20, 40
	for i := range msgs {
		msg := linktest.Payload(uint64(i), size)
		got := make([]byte, size)
		rr := r.b.Recv(linktest.TagOf(i), got)
		linktest.AwaitOK(t, r.a.Send(linktest.TagOf(i), msg), "send")
		linktest.AwaitOK(t, rr, "recv")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 {
		t.Fatal("no shares reported")
	}
	t.Logf("%d reports for %d messages, last %v", len(reports), msgs, reports[len(reports)-1].shares)
	if len(reports) >= msgs {
		t.Errorf("%d reports for %d messages of one size: want one per change", len(reports), msgs)
	}
	for i, rep := range reports {
		sum := 0.0
		for _, s := range rep.shares {
			sum += s.Fraction
		}
		if rep.bytes != size || math.Abs(sum-1) > 1e-9 {
			t.Errorf("report %d: %d bytes, shares %v summing to %v", i, rep.bytes, rep.shares, sum)
		}
		if i > 0 && balance.SameShares(reports[i-1].shares, rep.shares, 0.02) {
			t.Errorf("report %d repeats %v within two points of %v", i, rep.shares, reports[i-1].shares)
		}
	}
	if last := reports[len(reports)-1].shares; !balance.SameShares(last, r.pa.Shares(size), 0.02) {
		t.Errorf("shares in force %v moved from the last report %v without a report", r.pa.Shares(size), last)
	}
}
