package ucx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	fnet "github.com/flexlink/flexlink/fabric/net"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/ports"
	"github.com/flexlink/flexlink/internal/settings"
	"github.com/flexlink/flexlink/internal/testenv"
)

// TestSideChannelPortRange: with FLEXLINK_PORT_RANGE set, the side
// channel's listeners take the range's ports in order until every one is
// taken, then fail naming the variable; a bad value fails Open, naming it.
func TestSideChannelPortRange(t *testing.T) {
	t.Setenv("UCX_TLS", "tcp")
	env := settings.Map(map[string]string{"UCX_NET_DEVICES": "lo", "FLEXLINK_PORT_RANGE": "50000-40000"})
	if _, err := Open(Options{Env: env}); err == nil || !strings.Contains(err.Error(), "FLEXLINK_PORT_RANGE") {
		t.Fatalf("Open with FLEXLINK_PORT_RANGE=50000-40000: %v, want an error naming it", err)
	}
	r := ports.Range{First: 31050, Last: 31053}
	p, err := Open(Options{Env: settings.Map(map[string]string{"UCX_NET_DEVICES": "lo", "FLEXLINK_PORT_RANGE": r.String()})})
	if errors.Is(err, errs.ErrNotSupported) {
		testenv.Missing(t, "libucx0", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev := loDev(t, p)
	var got []int
	for i := 0; i <= r.Size(); i++ {
		var l fnet.Listener
		if l, err = p.Listen(ctx, dev); err != nil {
			break
		}
		defer l.Close()
		got = append(got, int(l.(*listener).h.addr.Port()))
	}
	testenv.PortsInRange(t, "side channel listeners", got, r, err)
}
