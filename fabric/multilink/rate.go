package multilink

import (
	"time"

	"github.com/flexlink/flexlink/fabric"

	"github.com/flexlink/flexlink/fabric/balance"
)

// Rater is a link that measures its own line rate (bytes/s): netlink's
// links over the tcp provider do, from the kernel's TCP_INFO.
type Rater interface {
	Rate() (bytesPerSec float64, ok bool)
}

// rated rewrites a message's observations from the links' measured
// rates, when every observed link has one: each part's duration becomes
// the link's latency plus its bytes at that rate. A part's completion time
// over such links includes the wait for the receiver to post its buffer
// (and, over shared cores, for the peer to be scheduled); every part of a
// message shares that wait, and counted as link time it drove the shares
// toward whichever link already had the larger part. The kernel's rate
// counts only the time the path was busy and not held back by the
// receiver. When no link is a Rater the timings stand; when one is but
// has no rate yet, nothing is observed (the timings would mislead).
func (b *balancer) rated(obs []balance.Observation) []balance.Observation {
	out := make([]balance.Observation, len(obs))
	for i, o := range obs {
		r, ok := b.links[o.Link].(Rater)
		if !ok {
			return obs
		}
		rate, ok := r.Rate()
		if !ok || !(rate > 0) {
			return nil
		}
		lat := b.links[o.Link].Props().Latency
		out[i] = balance.Observation{Link: o.Link, Bytes: o.Bytes,
			Duration: lat + time.Duration(float64(o.Bytes)/rate*float64(time.Second))}
	}
	return out
}

// OnDelivery reports whether every link completes a Send only once the
// receiver holds the bytes (it has a CompletesOnDelivery method that says
// so: netlink's links do). Such channels can set Options.NoAcks: the
// acknowledgements would repeat what the links' completions say, and
// without them a part that arrives before its Recv waits in the link
// instead of being staged (copied) by the receiver.
func OnDelivery(links []fabric.Link) bool {
	for _, l := range links {
		d, ok := l.(interface{ CompletesOnDelivery() bool })
		if !ok || !d.CompletesOnDelivery() {
			return false
		}
	}
	return len(links) > 0
}
