package comm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/internal/testenv"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// groupMsgs is one group: lens[s][d] bytes from s to d (0: no message).
type groupMsgs [][]int

// TestPXNGroup: 2 hosts × 4 ranks in one process, NICs lo and eth0 (two
// rails), FLEXLINK_PXN=2: a group where every rank sends every other rank
// a message of random length (some empty) and one where only a few pairs
// talk, every byte checked against the sender's formula. With
// FLEXLINK_PXN_GROUP=1 the cross-rail messages go through the relays (the
// counters show them relayed and received); with 0, or at level 0 (no
// relays), no proxy is made and the same groups take the communicator's
// links.
func TestPXNGroup(t *testing.T) {
	eth0 := testenv.SecondNIC(t)
	const hosts, per = 2, 4
	n := hosts * per
	rng := rand.New(rand.NewPCG(4, 2))
	all := make(groupMsgs, n)
	for s := range all {
		all[s] = make([]int, n)
		for d := range all[s] {
			if s != d && rng.IntN(6) > 0 {
				all[s][d] = rng.IntN(300 << 10)
			}
		}
		all[s][(s+1)%n] = 0 // an empty message
	}
	some := make(groupMsgs, n)
	for s := range some {
		some[s] = make([]int, n)
	}
	some[0][5], some[6][3], some[2][1] = 5000, 70000, 10 // cross-rail, cross-rail, same host
	for _, tc := range []struct{ level, group string }{{"2", "1"}, {"2", "0"}, {"0", "1"}} {
		on := tc.group
		if tc.level == "0" {
			on = "0" // no route has a relay: no service, the communicator's links
		}
		t.Run("level"+tc.level+"/group"+tc.group, func(t *testing.T) {
			env := map[string]string{"FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + eth0,
				"FLEXLINK_PXN": tc.level, "FLEXLINK_PXN_GROUP": tc.group}
			relayed, received := runGroups(t, hosts, per, env, []groupMsgs{all, some})
			t.Logf("through the proxies: %d network messages relayed, %d received", relayed, received)
			// Every cross-host pair goes through a proxy's stream: those on
			// different rails (lo: local ranks 0, 2; eth0: 1, 3) through
			// the relay on the destination's rail, the others through the
			// sender's own; one network message per chunk (an empty
			// message is one), and the "some" group has 2 of them, both
			// cross-rail.
			wantRelayed, wantReceived := int64(2), int64(2)
			for s := range n {
				for d := range n {
					if s/per != d/per && (all[s][d] > 0 || d == (s+1)%n) {
						k := int64(max(1, (all[s][d]+1<<20-1)>>20))
						wantReceived += k
						if s%2 != d%2 {
							wantRelayed += k
						}
					}
				}
			}
			switch {
			case on == "1" && (relayed != wantRelayed || received != wantReceived):
				t.Errorf("relayed %d network messages, received %d; want %d, %d", relayed, received, wantRelayed, wantReceived)
			case on == "0" && relayed+received != 0:
				t.Errorf("PXN_GROUP=0: relayed %d, received %d through the proxy", relayed, received)
			}
		})
	}
}

func groupByte(s, d, i int) byte { return byte(s*29 + d*13 + i + i>>10) }

// runRanks runs body on hosts × per ranks, each in its world
// communicator made with env, and fails the test with the first error.
func runRanks(t *testing.T, hosts, per int, env map[string]string, body func(c *Comm) error) {
	t.Helper()
	errs := worldtest.Run(t, worldtest.Spec{N: hosts * per, Env: env, Host: worldtest.PerHost(per), Timeout: 40 * time.Second}, New, body)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// runGroups runs each group on hosts × per ranks (every rank calls Group
// with its own entries, possibly none) and checks every byte; it returns
// the proxies' relayed and received messages summed over the ranks.
func runGroups(t *testing.T, hosts, per int, env map[string]string, groups []groupMsgs) (relayed, received int64) {
	t.Helper()
	n := hosts * per
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var mu sync.Mutex
	runRanks(t, hosts, per, env, func(c *Comm) error {
		r := c.Rank()
		for k, g := range groups {
			var ops []collectives.P2P
			recv := make([][]byte, n)
			empty := func(s, d int) bool { return k == 0 && d == (s+1)%n } // the empty messages of group 0
			for p := range n {
				if l := g[r][p]; l > 0 || empty(r, p) {
					b := make([]byte, l)
					for i := range b {
						b[i] = groupByte(r, p, i)
					}
					ops = append(ops, collectives.P2P{Send: true, Peer: p, Buf: collectives.HostBuffer(b)})
				}
				if l := g[p][r]; l > 0 || empty(p, r) {
					recv[p] = make([]byte, l)
					ops = append(ops, collectives.P2P{Peer: p, Buf: collectives.HostBuffer(recv[p])})
				}
			}
			if err := c.Run(ctx, "group send/recv", func(ctx context.Context) error { return c.PXNGroup(ctx, ops) }); err != nil {
				return fmt.Errorf("group %d: %w", k, err)
			}
			for s, b := range recv {
				for i, x := range b {
					if want := groupByte(s, r, i); x != want {
						return fmt.Errorf("group %d: byte %d from rank %d is %d, want %d", k, i, s, x, want)
					}
				}
			}
		}
		// Every rank is done (so is every relay) before the counters.
		if err := c.Run(ctx, "barrier", c.Engine().Barrier); err != nil {
			return err
		}
		if st, ok := c.PXNStats(); ok {
			mu.Lock()
			relayed += st.Relayed
			received += st.Received
			mu.Unlock()
		}
		return nil
	})
	return relayed, received
}

// TestPXNGroupRelayBusy: the relay of a pair is inside a group of its own
// on the same communicator, which it leaves only after the pair's group
// completed: the service carries the pair's message all the same (the
// relay's calls play no part in it).
func TestPXNGroupRelayBusy(t *testing.T) {
	eth0 := testenv.SecondNIC(t)
	env := map[string]string{"FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + eth0,
		"FLEXLINK_PXN": "2", "FLEXLINK_PXN_GROUP": "1"}
	const s, d = 0, 5 // lo rail -> eth0 rail
	pairDone := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg := make([]byte, 3<<20+17) // several chunks
	for i := range msg {
		msg[i] = groupByte(s, d, i)
	}
	group := func(c *Comm, ops ...collectives.P2P) error {
		return c.Run(ctx, "group send/recv", func(ctx context.Context) error { return c.PXNGroup(ctx, ops) })
	}
	runRanks(t, 2, 4, env, func(c *Comm) error {
		c.pxn.mu.Lock()
		route, _ := c.pxn.plan.Route(s, d)
		c.pxn.mu.Unlock()
		relay, other := route.Via, 2 // other: a sibling of the relay that feeds it last
		if relay == s || relay/4 != s/4 {
			return fmt.Errorf("rank %d relays %d -> %d: want another rank of its host", relay, s, d)
		}
		if other == relay {
			other = 3
		}
		switch c.Rank() {
		case s:
			return group(c, collectives.P2P{Send: true, Peer: d, Buf: collectives.HostBuffer(msg)})
		case d:
			got := make([]byte, len(msg))
			if err := group(c, collectives.P2P{Peer: s, Buf: collectives.HostBuffer(got)}); err != nil {
				return err
			}
			for i, x := range got {
				if x != msg[i] {
					return fmt.Errorf("byte %d from rank %d is %d, want %d", i, s, x, msg[i])
				}
			}
			close(pairDone)
		case relay: // busy until the pair is done
			return group(c, collectives.P2P{Peer: other, Buf: collectives.HostBuffer(make([]byte, 10))})
		case other:
			select {
			case <-pairDone:
			case <-ctx.Done():
				return ctx.Err()
			}
			return group(c, collectives.P2P{Send: true, Peer: relay, Buf: collectives.HostBuffer(make([]byte, 10))})
		}
		return nil
	})
}

// TestPXNGroupInfoLine: with FLEXLINK_DEBUG=INFO a group that goes
// through the proxies logs one "pxn group" line with its split and its
// receives.
func TestPXNGroupInfoLine(t *testing.T) {
	vars := map[string]string{"FLEXLINK_DEBUG": "INFO", "FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp",
		"FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t), "FLEXLINK_PXN": "2", "FLEXLINK_PXN_GROUP": "1"}
	const n = 4 // 2 hosts x 2: local rank 0 on lo, 1 on eth0
	logs := runLoggedHosts(t, n, vars, func(r int) string { return fmt.Sprint("host", r/2) }, func(c *Comm) error {
		me := c.Rank()
		var ops []collectives.P2P
		for p := range n {
			if p != me {
				ops = append(ops, collectives.P2P{Send: true, Peer: p, Buf: collectives.HostBuffer(make([]byte, 100))},
					collectives.P2P{Peer: p, Buf: collectives.HostBuffer(make([]byte, 100))})
			}
		}
		return c.Run(context.Background(), "group send/recv", func(ctx context.Context) error { return c.PXNGroup(ctx, ops) })
	})
	for r, log := range logs {
		// Two peers per rank are on the other host, both carried by the
		// stream of the rank there on this rank's rail: one multi-receive
		// of 2 buffers; the third peer is on this host.
		f := fields(log, "pxn group", 0)
		if f == nil || f["sends"] != "2" || f["receives"] != "2" || f["on_host"] != "2" || f["received"] != "2" || f["receives_posted"] != "1" {
			t.Errorf("rank %d: line %v", r, f)
		}
	}
}

// TestPXNGroupSplit: a sub-communicator that spans hosts starts its own
// group service at Split: world ranks {0,1,4,5} and {2,3,6,7} (each with
// a rank on either rail of either host) run a group of every pair, the
// cross-rail ones relayed.
func TestPXNGroupSplit(t *testing.T) {
	env := map[string]string{"FLEXLINK_TRANSPORT": "auto", "FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "=lo," + testenv.SecondNIC(t),
		"FLEXLINK_PXN": "2", "FLEXLINK_PXN_GROUP": "1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runRanks(t, 2, 4, env, func(w *Comm) error {
		c, err := w.Split(ctx, w.Rank()%4/2, w.Rank())
		if err != nil {
			return err
		}
		defer c.Close()
		n, me := c.Size(), c.Rank()
		var ops []collectives.P2P
		recv := make([][]byte, n)
		for p := range n {
			if p == me {
				continue
			}
			b := make([]byte, 5000+100*me+p)
			for i := range b {
				b[i] = groupByte(me, p, i)
			}
			recv[p] = make([]byte, 5000+100*p+me)
			ops = append(ops, collectives.P2P{Send: true, Peer: p, Buf: collectives.HostBuffer(b)}, collectives.P2P{Peer: p, Buf: collectives.HostBuffer(recv[p])})
		}
		if err := c.Run(ctx, "group send/recv", func(ctx context.Context) error { return c.PXNGroup(ctx, ops) }); err != nil {
			return err
		}
		for s, b := range recv {
			for i, x := range b {
				if want := groupByte(s, me, i); x != want {
					return fmt.Errorf("byte %d from rank %d is %d, want %d", i, s, x, want)
				}
			}
		}
		if err := c.Run(ctx, "barrier", c.Engine().Barrier); err != nil {
			return err
		}
		// Sub-ranks 0, 1 on one host, 2, 3 on the other; 0, 2 on lo and
		// 1, 3 on the other rail: each rank relays one sibling's message.
		if st, ok := c.PXNStats(); !ok || st.Relayed != 1 {
			return fmt.Errorf("sub-communicator %s: counters %+v (%v), want 1 message relayed", c.Name(), st, ok)
		}
		return nil
	})
}
