package tcp

import (
	"context"
	"testing"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/testenv"
)

// TestListenPortRange: with FLEXLINK_PORT_RANGE's range in Options.Ports,
// two providers (two ranks of one host) share the range: their listeners
// take its ports in order, each port once, until every port is taken;
// the next listener fails with ports.ErrExhausted naming the variable and
// the range, and a connection to a listener in the range works. (A port
// another process holds is skipped, so the test asks only for order and
// bounds.)
func TestListenPortRange(t *testing.T) {
	r := ports.Range{First: 31010, Last: 31015}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ps [2]*Provider
	for i := range ps {
		p, err := New(Options{IfName: "lo", Sockets: 1, Ports: r})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ps[i] = p
	}
	var got []int
	var ls []fnet.Listener
	var err error
	for i := 0; err == nil && i <= r.Size(); i++ {
		var l fnet.Listener
		if l, err = ps[i%2].Listen(ctx, 0); err == nil {
			ls = append(ls, l)
			got = append(got, int(l.(*listener).h.addr.Port()))
		}
	}
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	testenv.PortsInRange(t, "listeners", got, r, err)
	s, err := ps[1].Connect(ctx, 0, ls[0].Handle())
	if err != nil {
		t.Fatalf("connect to a listener in the range: %v", err)
	}
	defer s.Close()
	rc, err := ls[0].Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
}
