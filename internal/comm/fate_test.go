package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// fateHost names rank r's host in these tests.
func fateHost(r int) string { return fmt.Sprintf("fatehost-%d", r) }

// fateWorld makes n ranks' world communicators over a store that keeps
// going after a loss (as libnccl's rendezvous does) and real tcp links.
func fateWorld(t *testing.T, n int) ([]*Comm, *worldtest.Members) {
	t.Helper()
	w := worldtest.Start(t, worldtest.Spec{N: n, Transport: "tcp", KeepOnLoss: true, Host: fateHost, Timeout: 20 * time.Second,
		Env: map[string]string{"FLEXLINK_CHUNK_BYTES": "4096", "FLEXLINK_TIMEOUT": "30s"}}, New)
	return w.Comms, w.Members
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sumOfRanks allreduces each member's world rank + 1 (as int64) and
// checks the result against the members' sum.
func sumOfRanks(ctx context.Context, c *Comm) error {
	x := []int64{int64(c.WorldRank() + 1)}
	err := c.Run(ctx, "allreduce", func(ctx context.Context) error {
		return c.engine.AllReduce(ctx, int64Bytes(x), int64Bytes(x), 1, dtype.Int64, dtype.Sum)
	})
	if err != nil {
		return err
	}
	want := int64(0)
	for _, m := range c.members {
		want += int64(m + 1)
	}
	if x[0] != want {
		return fmt.Errorf("rank %d of %s: allreduce %d, want %d", c.rank, c.name, x[0], want)
	}
	return nil
}

func noErrs(t *testing.T, what string, es []error) {
	t.Helper()
	for i, err := range es {
		if err != nil {
			t.Errorf("%s, rank %d: %v", what, i, err)
		}
	}
}

// wantEnded checks that err is a failure on an ended communicator that
// names it, wraps want, and carries every one of subs.
func wantEnded(t *testing.T, who string, err error, want error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want an error", who)
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: %v\nwant it to wrap %v", who, err, want)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %v\nwant it to name %q", who, err, s)
		}
	}
}

// split splits every rank's c by colors[rank] (NoColor: none).
func split(t *testing.T, ctx context.Context, cs []*Comm, colors []int) []*Comm {
	t.Helper()
	out := make([]*Comm, len(cs))
	noErrs(t, "split", worldtest.Each(cs, func(i int, c *Comm) error {
		var err error
		out[i], err = c.Split(ctx, colors[i], 0)
		return err
	}))
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() {
		worldtest.Each(out, func(_ int, c *Comm) error { return c.Close() })
	})
	return out
}

// TestRevokeScope: one member revokes a child while another waits in a
// call on it. Every member's pending and later calls on the child fail
// naming it, the revoking rank and its host; the parent and a sibling go
// on computing right results. Revoking the world ends the world only.
func TestRevokeScope(t *testing.T) {
	const n = 4
	tests := []struct {
		name   string
		colors []int // the split that makes the revoked child (color 0) and its sibling
		target func(world, child *Comm) *Comm
	}{
		{"child", []int{0, 1, 0, 1}, func(_, child *Comm) *Comm { return child }},
		{"world", []int{0, 1, 0, 1}, func(world, _ *Comm) *Comm { return world }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			world, _ := fateWorld(t, n)
			kids := split(t, ctx, world, tc.colors)
			noErrs(t, "child allreduce before", worldtest.Each(kids, func(_ int, c *Comm) error { return sumOfRanks(ctx, c) }))
			targets := make([]*Comm, n)
			for r := range n {
				if tc.colors[r] == 0 {
					targets[r] = tc.target(world[r], kids[r])
				}
			}
			// Rank 2 waits in a call that rank 0 never joins; rank 0 revokes.
			pending := make(chan error, 1)
			go func() { pending <- sumOfRanks(ctx, targets[2]) }()
			targets[0].Revoke(fmt.Errorf("test revokes: %w", errs.ErrAborted))
			name := targets[0].Name()
			wantEnded(t, "rank 2's pending call", <-pending, errs.ErrAborted, "communicator "+name, "rank 0", fateHost(0))
			for _, r := range []int{0, 2} {
				wantEnded(t, fmt.Sprintf("rank %d's later call", r), sumOfRanks(ctx, targets[r]), errs.ErrAborted, name, fateHost(0))
			}
			if tc.name == "world" {
				// The world's other members learn of it too.
				<-world[1].Done()
				wantEnded(t, "rank 1 on the world", world[1].Err(), errs.ErrAborted, name, fateHost(0))
			} else {
				noErrs(t, "parent allreduce after", worldtest.Each(world, func(_ int, c *Comm) error { return sumOfRanks(ctx, c) }))
			}
			noErrs(t, "children allreduce after", worldtest.Each(kids, func(i int, c *Comm) error {
				if c == targets[i] {
					return nil
				}
				return sumOfRanks(ctx, c)
			}))
		})
	}
}

// kill models rank r's process dying: its bootstrap connection drops
// without a goodbye and every link of its communicators breaks.
func kill(t *testing.T, stores *worldtest.Members, r int, its ...*Comm) {
	t.Helper()
	if err := stores.Lose(r); err != nil {
		t.Fatal(err)
	}
	for _, c := range its {
		c.AbortLinks(fmt.Errorf("rank %d killed: %w", r, errs.ErrPeerLost))
	}
}

// TestLossEndsHolders: a member dies while the others wait in a call on
// the world. Every communicator that holds it fails on every member,
// naming the dead rank and its host; one that does not hold it goes on;
// the survivors shrink the world and the shrunk one computes right.
func TestLossEndsHolders(t *testing.T) {
	const n, victim = 4, 3
	ctx := ctxT(t, 60*time.Second)
	world, stores := fateWorld(t, n)
	kids := split(t, ctx, world, []int{0, 0, 1, 1}) // {0,1} and {2,3}
	pending := make(chan error, n-1)
	for r := range n - 1 {
		go func() { pending <- sumOfRanks(ctx, world[r]) }()
	}
	start := time.Now()
	kill(t, stores, victim, world[victim], kids[victim])
	for range n - 1 {
		wantEnded(t, "a survivor's pending world call", <-pending, errs.ErrPeerLost, "rank 3", fateHost(victim))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("survivors noticed after %v", d)
	}
	wantEnded(t, "rank 2 on {2,3}", sumOfRanks(ctx, kids[2]), errs.ErrPeerLost, "rank 3", fateHost(victim))
	noErrs(t, "{0,1} after the loss", worldtest.Each(kids[:2], func(_ int, c *Comm) error { return sumOfRanks(ctx, c) }))
	shrunk := make([]*Comm, n-1)
	noErrs(t, "shrink", worldtest.Each(world[:n-1], func(i int, c *Comm) error {
		var err error
		shrunk[i], err = c.Shrink(ctx, []int{victim})
		return err
	}))
	noErrs(t, "shrunk allreduce", worldtest.Each(shrunk, func(_ int, c *Comm) error { return sumOfRanks(ctx, c) }))
	noErrs(t, "shrunk close", worldtest.Each(shrunk, func(_ int, c *Comm) error { return c.Close() }))
	world[victim], kids[victim] = nil, nil // gone: the cleanups skip it
	_ = kids
}

// TestShrinkLiveRank: the others shrink a live rank away; both the shrunk
// communicator and the parent (with the excluded rank) compute right.
func TestShrinkLiveRank(t *testing.T) {
	const n = 4
	ctx := ctxT(t, 60*time.Second)
	world, _ := fateWorld(t, n)
	shrunk := make([]*Comm, n)
	noErrs(t, "shrink", worldtest.Each(world[1:], func(i int, c *Comm) error {
		var err error
		shrunk[i+1], err = c.Shrink(ctx, []int{0})
		return err
	}))
	noErrs(t, "shrunk allreduce", worldtest.Each(shrunk, func(_ int, c *Comm) error {
		if c.Size() != n-1 {
			return fmt.Errorf("shrunk size %d", c.Size())
		}
		return sumOfRanks(ctx, c)
	}))
	noErrs(t, "parent allreduce", worldtest.Each(world, func(_ int, c *Comm) error { return sumOfRanks(ctx, c) }))
	noErrs(t, "shrunk close", worldtest.Each(shrunk, func(_ int, c *Comm) error { return c.Close() }))
}
