package comm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// TestCloseWhileOthersInCall: a member that closes the communicator after
// two collectives while the others are in their third makes them fail at
// once (not at their 30 s deadline) with a mismatch naming the closer and
// the call, published so a launcher can read it; the closer's Close
// returns. Members that close after the same number of calls (a world and
// a sub-communicator) see no error.
func TestCloseWhileOthersInCall(t *testing.T) {
	const n, closer = 3, 1
	comms, _ := fateWorld(t, n)
	ctx := ctxT(t, 20*time.Second)
	for range 2 {
		noErrs(t, "allreduce", worldtest.Each(comms, func(_ int, c *Comm) error { return sumOfRanks(ctx, c) }))
	}
	start := time.Now()
	errs3 := worldtest.Each(comms, func(r int, c *Comm) error {
		if r == closer {
			return c.Close()
		}
		return sumOfRanks(ctx, c)
	})
	took := time.Since(start)
	if took > 10*time.Second {
		t.Errorf("took %v; want the others to fail at once, not at their deadline", took)
	}
	if errs3[closer] != nil {
		t.Errorf("the closer's Close: %v", errs3[closer])
	}
	want := fmt.Sprintf("rank %d (world rank %d) on %s closed communicator %s after 2 collectives while rank", closer, closer, fateHost(closer), comms[0].name)
	for r, err := range errs3 {
		if r == closer {
			continue
		}
		if !errors.Is(err, errs.ErrMismatch) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "was in allreduce #3") {
			t.Errorf("rank %d: %v; want a mismatch saying %q ... was in allreduce #3", r, err, want)
		}
	}
	// The end a member published reads back as the closer's.
	b, err := comms[0].world.store.Get(ctx, endKey(comms[0].name))
	if err != nil {
		t.Fatal(err)
	}
	rep, ok := DecodeEnd(endKey(comms[0].name), b)
	if !ok || rep.Kind != "mismatch" || rep.ClosedBy != closer || rep.ClosedCalls != 2 || rep.InCall != "allreduce #3" {
		t.Errorf("published end %+v, want the closer %d after 2 calls, in allreduce #3", rep, closer)
	}
}

// TestCloseSameCount: members that close after the same number of
// collectives, at different times, see no mismatch.
func TestCloseSameCount(t *testing.T) {
	comms, _ := fateWorld(t, 3)
	ctx := ctxT(t, 20*time.Second)
	sub := split(t, ctx, comms, []int{0, 0, 0})
	noErrs(t, "sub allreduce", worldtest.Each(sub, func(_ int, c *Comm) error { return sumOfRanks(ctx, c) }))
	// Each member closes the child in its own time (its close barrier is
	// no later call), then the world goes on.
	noErrs(t, "sub close", worldtest.Each(sub, func(_ int, c *Comm) error { return c.Close() }))
	noErrs(t, "world allreduce", worldtest.Each(comms, func(_ int, c *Comm) error { return sumOfRanks(ctx, c) }))
}
