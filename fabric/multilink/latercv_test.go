package multilink_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
)

// rated is a link that reports a measured line rate, as netlink's links
// over the tcp provider do (from TCP_INFO); ok false until warm.
type rated struct {
	fabric.Link
	rate float64
	warm int
	n    *int
}

func (r rated) Rate() (float64, bool) {
	*r.n++
	return r.rate, *r.n > r.warm
}

// TestSharesWithLateReceiver: two links at 2:1 bandwidth that both claim
// the same nominal speed (two veth rails), a receiver that posts each
// receive some time after the send (a ring step busy reducing), so every
// part of a message waits for it. Message times then say nothing of the
// links (the parts finish together when the receiver posts, or by the
// wire when it is early), and the shares drifted to whichever link had the
// larger part; the links' own rates, which the channel observes instead
// when links report them, bring the shares to the bandwidths' 2:1 and
// keep them there. (Timed links without rates are left out: their shares
// follow wall-clock timings, which on shared cores are not reproducible.)
func TestSharesWithLateReceiver(t *testing.T) {
	for _, tc := range []struct {
		late  time.Duration
		rates bool
	}{{0, true}, {3 * time.Millisecond, true}, {8 * time.Millisecond, true}} {
		t.Run(fmt.Sprintf("late=%v/rates=%v", tc.late, tc.rates), func(t *testing.T) {
			bw := []float64{400e6, 200e6}
			var calls [2]int
			var la, lb []fabric.Link
			for i, b := range bw {
				nw := fake.NewNetwork(2, fake.Options{Bandwidth: b, MaxSegment: 64 << 10})
				a := nw.Link(0, 1)
				if tc.rates {
					a = rated{Link: a, rate: b * (0.9 + 0.2*float64(i)), warm: 2, n: &calls[i]} // ±10% off
				}
				la, lb = append(la, a), append(lb, nw.Link(1, 0))
			}
			plan := func(links []fabric.Link) *balance.Planner {
				specs := multilink.Specs(links)
				for i := range specs {
					specs[i].Bandwidth = 1e9
				}
				return mustPlanner(t, specs, multilink.PlannerConfig(links))
			}
			pa := plan(la)
			a := multilink.New(1, la, pa, multilink.Options{})
			b := multilink.New(0, lb, plan(lb), multilink.Options{})
			defer a.Close()
			defer b.Close()
			const size, msgs = 1 << 20, 60
			var fracs []float64
			for i := range msgs {
				msg := linktest.Payload(uint64(i), size)
				got := make([]byte, size)
				s := a.Send(linktest.TagOf(i), msg)
				time.Sleep(tc.late)
				rr := b.Recv(linktest.TagOf(i), got)
				linktest.AwaitOK(t, s, "send")
				linktest.AwaitOK(t, rr, "recv")
				if i >= msgs/2 {
					fracs = append(fracs, balance.FractionOf(pa.Shares(size), 0))
				}
			}
			lo, hi, sum := 1.0, 0.0, 0.0
			for _, f := range fracs {
				lo, hi, sum = math.Min(lo, f), math.Max(hi, f), sum+f
			}
			mean := sum / float64(len(fracs))
			t.Logf("link 0's share over the second half: mean %.3f, range %.3f..%.3f (bandwidths say 0.667)", mean, lo, hi)
			if math.Abs(mean-2.0/3) > 0.07 || hi-lo > 0.15 {
				t.Errorf("link 0's share mean %.3f range %.3f..%.3f, want 0.667 ± 0.07, steady within 0.15", mean, lo, hi)
			}
		})
	}
}
