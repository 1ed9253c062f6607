package proxy

import (
	"errors"
	"testing"

	"flexlink/fabric/net"
	"flexlink/fabric/net/ucx"
	"flexlink/internal/errs"
	"flexlink/internal/testenv"
)

// openUCX is a rank's provider on UCX's tcp transport over loopback.
func openUCX(t *testing.T) (net.Provider, int) {
	t.Helper()
	t.Setenv("UCX_TLS", "tcp")
	t.Setenv("UCX_NET_DEVICES", "lo")
	p, err := ucx.Open(ucx.Options{})
	if errors.Is(err, errs.ErrNotSupported) {
		testenv.Missing(t, "libucx0", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for i, d := range p.Devices() {
		if d.Name == "lo" {
			return p, i
		}
	}
	t.Fatalf("no loopback device in %v", p.Devices())
	return nil, 0
}

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
			p, dev = openUCX(t)
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
