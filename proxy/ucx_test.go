package proxy

import (
	"testing"

	"github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/fabric/net/ucx/ucxtest"
)

// TestUCX: the proxy over the ucx provider, whose tags carry 20 bits:
// an uneven AllToAllv through relays (multi-receives) and groups through
// the group service (streams, clear-to-send), every byte checked. The
// ranks, goroutines of this process, share one provider, as the ranks of
// a process share its UCP context.
func TestUCX(t *testing.T) {
	var p net.Provider
	var dev int
	shared := func(t *testing.T) (net.Provider, int) {
		if p == nil {
			p, dev = ucxtest.Loopback(t)
		}
		return p, dev
	}
	j := newJobOn(t, 2, 2, railVia(2), 1<<10, shared)
	for seed := range 2 {
		st := j.run(t, unevenLengths(4, 5000, uint64(seed)))
		var relayed int64
		for _, s := range st {
			relayed += s.Relayed
		}
		if relayed == 0 {
			t.Errorf("seed %d: nothing relayed", seed)
		}
	}
	g := newGroupJobOn(t, j)
	ms := g.relayedPairs(5000, 3)
	noErrs(t, g.run(t, ms, 3))
}
