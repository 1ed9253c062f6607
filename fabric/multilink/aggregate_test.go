package multilink_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
)

// Three links of very unequal speed, in real time (the fake network's rate
// limits): 400 + 100 + 50 MB/s.
var unequalRates = []float64{400e6, 100e6, 50e6}

func unequalLinks() []fake.Options {
	var out []fake.Options
	for i, bw := range unequalRates {
		out = append(out, fake.Options{Seed: int64(i + 1), Latency: 100 * time.Microsecond, Bandwidth: bw, MaxSegment: 256 << 10})
	}
	return out
}

// wrongPriors gives the planner the same nominal figures for every link,
// so only the feedback of measured part times can find the 8:2:1 split.
func wrongPriors(t testing.TB) func(links []fabric.Link) *balance.Planner {
	return func(links []fabric.Link) *balance.Planner {
		specs := multilink.Specs(links)
		for i := range specs {
			specs[i].Bandwidth = 200e6
		}
		p, err := balance.NewPlanner(specs, nil, balance.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// stream sends n messages of size bytes from r.a to r.b, keeping window
// messages in flight, with every receive posted ahead of its message, and
// checks every byte. It returns how long the stream took.
func stream(t testing.TB, r *rig, n, size, window int, seed uint64) time.Duration {
	msgs := make([][]byte, window)
	got := make([][]byte, window)
	for i := range msgs {
		msgs[i] = linktest.Payload(seed+uint64(i), size)
		got[i] = make([]byte, size)
	}
	sends := make([]fabric.Request, n)
	recvs := make([]fabric.Request, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	post := func(i int) {
		recvs[i] = r.b.Recv(linktest.TagOf(i), got[i%window])
		sends[i] = r.a.Send(linktest.TagOf(i), msgs[i%window])
	}
	for i := range min(window, n) {
		post(i)
	}
	for i := range n {
		if err := fabric.WaitAll(ctx, sends[i], recvs[i]); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(got[i%window], msgs[i%window]) {
			t.Fatalf("message %d: data differs", i)
		}
		clear(got[i%window])
		if i+window < n {
			post(i + window)
		}
	}
	return time.Since(start)
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// TestAggregateBandwidth: after warming up, the planner has found the
// split in proportion to the links' rates, and the channel moves data
// over all of them. The throughput itself is the benchmark's
// (BenchmarkMultilinkAggregate, docs/PERF.md: 0.97 of the links' sum):
// the fake links pace by wall-clock timers, and on two cores shared with
// other test packages a whole window lost its CPU (0.09 of the sum), so
// it is logged here, not asserted.
func TestAggregateBandwidth(t *testing.T) {
	r := newRig(t, unequalLinks(), wrongPriors(t), multilink.Options{})
	const size, window = 4 << 20, 6
	stream(t, r, 20, size, window, 1) // warm-up: the planner learns
	const n = 40
	d := stream(t, r, n, size, window, 100)
	f := float64(n*size) / d.Seconds() / sum(unequalRates)
	t.Logf("%d × %d MiB in %v: %.1f MB/s, %.3f of the links' sum", n, size>>20, d, float64(n*size)/d.Seconds()/1e6, f)
	shares := r.pa.Shares(size)
	t.Logf("shares %v", shares)
	// The priors split evenly; the measurements must have moved the
	// shares well toward 8:2:1. (Real-time timings on busy cores are too
	// noisy to pin the shares closer than this; the balance package's
	// simulations pin them to 3%.)
	byLink := map[int]float64{}
	for _, s := range shares {
		byLink[s.Link] = s.Fraction
	}
	switch {
	case byLink[0] >= 0.55 && byLink[2] <= 0.25 && byLink[2] > 0:
	case raceEnabled: // the instrumented copies cap the fast link below its rate, so its share is lower
		t.Logf("shares %v not checked under the race detector", shares)
	default:
		t.Errorf("shares %v: want link 0 (400 MB/s) above 0.55 and link 2 (50 MB/s) in (0, 0.25]; the even priors were not corrected", shares)
	}
}

// TestClockIsInjected: with a clock that never moves every part takes no
// time, the planner learns nothing, and its shares stay at the priors (its
// shares move under the real clock: TestAggregateBandwidth).
func TestClockIsInjected(t *testing.T) {
	frozen := time.Unix(1e9, 0)
	r := newRig(t, unequalLinks(), wrongPriors(t), multilink.Options{Now: func() time.Time { return frozen }})
	before := fmt.Sprint(r.pa.Shares(1 << 20))
	stream(t, r, 8, 1<<20, 2, 1)
	if after := fmt.Sprint(r.pa.Shares(1 << 20)); after != before {
		t.Fatalf("shares moved from %s to %s although the injected clock never advanced", before, after)
	}
}

// BenchmarkMultilinkAggregate streams 4 MiB messages over the three unequal
// links and reports the achieved fraction of the sum of their rates.
func BenchmarkMultilinkAggregate(b *testing.B) {
	r := newRig(b, unequalLinks(), wrongPriors(b), multilink.Options{})
	const size, window = 4 << 20, 6
	stream(b, r, 20, size, window, 1)
	b.SetBytes(size)
	b.ResetTimer()
	d := stream(b, r, b.N, size, window, 100)
	frac := float64(b.N*size) / d.Seconds() / sum(unequalRates)
	b.ReportMetric(frac, "frac_of_sum")
	b.Logf("%d messages: %.3f of the sum of the link rates (%.0f MB/s of %.0f)", b.N, frac, frac*sum(unequalRates)/1e6, sum(unequalRates)/1e6)
}
