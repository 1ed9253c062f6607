package rank

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/worldtest"
)

// TestCrossHostOverNet: ranks on two "hosts" (host names differ) talk over
// the network transport (FLEXLINK_TRANSPORT=auto), ranks on one host over
// shm; every collective and a sub-communicator that spans the hosts give
// the float64 reference results, and the links report say which kind each
// pair uses.
func TestCrossHostOverNet(t *testing.T) {
	// The NICs are named (loopback and the machine's own eth/en ones):
	// every interface would take the bridges another test package makes
	// and tears down meanwhile (CI, 2026-11-30: pxnbr1, proxy/pxntest's).
	for _, tc := range []struct{ name, ifname, rails string }{
		{"all-nics", "lo,eth,en", "0"},
		{"one-rail", "lo,eth,en", "1"},
		// Loopback and the first non-loopback NIC as two rails: a
		// multi-link channel over two net links between every pair of
		// hosts (one rail where the machine has no other NIC).
		{"two-rails", "lo,eth,en", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4
			host := worldtest.PerHost(2)
			vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_RAILS": tc.rails, "FLEXLINK_NET_IFNAME": tc.ifname, "FLEXLINK_CHUNK_BYTES": "65536"}
			worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: vars, Host: host}, New, func(c *Comm) error {
				ctx := context.Background()
				const count = 300007
				x := make([]float64, count)
				for i := range x {
					x[i] = float64((c.Rank()+1)*i%977) / 7
				}
				if err := c.AllReduce(ctx, Of(x), Of(x), dtype.Sum); err != nil {
					return err
				}
				for i, v := range x {
					want := 0.0
					for r := 0; r < n; r++ {
						want += float64((r+1)*i%977) / 7
					}
					if d := v - want; d > 1e-9 || d < -1e-9 {
						return fmt.Errorf("allreduce element %d = %v, want %v", i, v, want)
					}
				}
				send := make([]int32, n*1000)
				for i := range send {
					send[i] = int32(c.Rank()*1_000_000 + i)
				}
				recv := make([]int32, n*1000)
				if err := c.AllToAll(ctx, Of(send), Of(recv)); err != nil {
					return err
				}
				for p := 0; p < n; p++ {
					for k := 0; k < 1000; k++ {
						if want := int32(p*1_000_000 + c.Rank()*1000 + k); recv[p*1000+k] != want {
							return fmt.Errorf("alltoall from %d element %d = %d, want %d", p, k, recv[p*1000+k], want)
						}
					}
				}
				// Ranks 0 and 2 (one per host) form a sub-communicator.
				sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
				if err != nil {
					return err
				}
				v := []int64{int64(c.Rank())}
				if err := sub.AllReduce(ctx, Of(v), Of(v), dtype.Sum); err != nil {
					return err
				}
				if want := int64(c.Rank()%2 + c.Rank()%2 + 2); v[0] != want {
					return fmt.Errorf("split allreduce = %d, want %d", v[0], want)
				}
				for _, l := range sub.Links() {
					if !strings.HasPrefix(l.Kind, "net") && l.Kind != "multi" {
						return fmt.Errorf("sub-communicator link to %s is %s, want net", l.PeerHost, l.Kind)
					}
				}
				sub.Close()
				for _, l := range c.Links() {
					want := "shm"
					if l.PeerHost != c.Host() {
						want = "net"
					}
					if !strings.HasPrefix(l.Kind, want) && !(want == "net" && l.Kind == "multi") {
						return fmt.Errorf("link to rank %d on %s is %s (%s), want %s", l.Peer, l.PeerHost, l.Kind, l.Desc, want)
					}
				}
				return nil
			}))
		})
	}
}

// TestShrink: ranks 0..2 of 4 shrink rank 3 away without rank 3 taking
// part; the new communicator's allreduce sums over the three; bad exclude
// lists are errors.
func TestShrink(t *testing.T) {
	const n = 4
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Transport: "auto", Env: smallChunks}, New, func(c *Comm) error {
		ctx := context.Background()
		if c.Rank() == n-1 {
			return nil // leaves: never calls Shrink
		}
		if _, err := c.Shrink(ctx, []int{c.Rank()}); err == nil || !strings.Contains(err.Error(), "excludes itself") {
			return fmt.Errorf("excluding itself: %v", err)
		}
		if _, err := c.Shrink(ctx, []int{n}); err == nil || !strings.Contains(err.Error(), "out of range") {
			return fmt.Errorf("excluding rank %d: %v", n, err)
		}
		s, err := c.Shrink(ctx, []int{n - 1})
		if err != nil {
			return err
		}
		defer s.Close()
		if s.Size() != n-1 || s.Rank() != c.Rank() {
			return fmt.Errorf("shrunk communicator: rank %d of %d, want %d of %d", s.Rank(), s.Size(), c.Rank(), n-1)
		}
		v := []float64{float64(c.Rank() + 1)}
		if err := s.AllReduce(ctx, Of(v), Of(v), dtype.Sum); err != nil {
			return err
		}
		if v[0] != 6 {
			return fmt.Errorf("allreduce over the shrunk communicator = %v, want 6", v[0])
		}
		return nil
	}))
}
