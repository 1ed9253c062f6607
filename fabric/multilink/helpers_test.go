package multilink_test

import (
	"testing"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/fake"
	"github.com/flexlink/flexlink/fabric/multilink"
)

// rig is a pair of ranks, 0 and 1, joined by one fake network per link, so
// each link has its own bandwidth, latency and failures.
type rig struct {
	nets []*fake.Network
	a, b fabric.Link // rank 0's and rank 1's multilink
	pa   *balance.Planner
}

// newRig builds the pair. planner, when not nil, makes each side's planner
// from that side's links; otherwise New builds one from the links' Props.
func newRig(t testing.TB, opts []fake.Options, planner func(links []fabric.Link) *balance.Planner, mo multilink.Options) *rig {
	t.Helper()
	r := &rig{}
	var la, lb []fabric.Link
	for _, o := range opts {
		nw := fake.NewNetwork(2, o)
		r.nets = append(r.nets, nw)
		la, lb = append(la, nw.Link(0, 1)), append(lb, nw.Link(1, 0))
	}
	var pb *balance.Planner
	if planner != nil {
		r.pa, pb = planner(la), planner(lb)
	}
	r.a = multilink.New(1, la, r.pa, mo)
	r.b = multilink.New(0, lb, pb, mo)
	t.Cleanup(func() { r.a.Close(); r.b.Close() })
	return r
}

func mustPlanner(t testing.TB, specs []balance.LinkSpec, cfg balance.Config) *balance.Planner {
	t.Helper()
	p, err := balance.NewPlanner(specs, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
