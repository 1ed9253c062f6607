package multilink_test

import (
	"testing"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/linktest"
	"github.com/flexlink/flexlink/fabric/multilink"
)

// TestConformance runs the Link conformance suite over multilink pairs: one
// link (nothing to split), three ideal links (large messages split three
// ways), and three segmented, timed links of unequal speed; and the last
// two with a tail (Options.Tail) in every message of 64 KiB or more.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name   string
		links  []fake.Options
		tail   float64 // Options.Tail, from 64 KiB messages on
		noAcks bool    // Options.NoAcks
	}{
		{"OneLink", []fake.Options{{}}, 0, false},
		{"ThreeIdeal", []fake.Options{{}, {}, {}}, 0, false},
		{"ThreeIdealTail", []fake.Options{{}, {}, {}}, 0.4, false},
		{"ThreeTimed", []fake.Options{
			{Seed: 1, Latency: 20 * time.Microsecond, Bandwidth: 8e9, MaxSegment: 1 << 20},
			{Seed: 2, Latency: 50 * time.Microsecond, Jitter: 100 * time.Microsecond, Bandwidth: 2e9, MaxSegment: 256 << 10},
			{Seed: 3, Latency: 80 * time.Microsecond, Bandwidth: 1e9, MaxSegment: 64 << 10},
		}, 0, false},
		{"ThreeTimedTail", []fake.Options{
			{Seed: 1, Latency: 20 * time.Microsecond, Bandwidth: 8e9, MaxSegment: 1 << 20},
			{Seed: 2, Latency: 50 * time.Microsecond, Jitter: 100 * time.Microsecond, Bandwidth: 2e9, MaxSegment: 256 << 10},
			{Seed: 3, Latency: 80 * time.Microsecond, Bandwidth: 1e9, MaxSegment: 64 << 10},
		}, 0.4, false},
		// NoAcks, as channels over links that complete on delivery
		// (netlink's) run: the fake fabric's links do too.
		{"ThreeTimedTailNoAcks", []fake.Options{
			{Seed: 1, Latency: 20 * time.Microsecond, Bandwidth: 8e9, MaxSegment: 1 << 20},
			{Seed: 2, Latency: 50 * time.Microsecond, Jitter: 100 * time.Microsecond, Bandwidth: 2e9, MaxSegment: 256 << 10},
			{Seed: 3, Latency: 80 * time.Microsecond, Bandwidth: 1e9, MaxSegment: 64 << 10},
		}, 0.4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (fabric.Link, fabric.Link) {
				r := newRig(t, tc.links, nil, multilink.Options{Tail: tc.tail, NoAcks: tc.noAcks, TailMin: 64 << 10})
				return r.a, r.b
			})
		})
	}
}
