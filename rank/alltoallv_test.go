package rank

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/flexlink/flexlink/internal/worldtest"
)

// TestAllToAllvPXN: 2 hosts × 3 ranks over the network transport
// (loopback and the first NIC as two rails), AllToAll (also in place) and
// AllToAllv with uneven counts, with PXN off (the engine's all-to-all and
// a group of sends and receives), at level 0 and at level 2 (the proxy).
func TestAllToAllvPXN(t *testing.T) {
	const n = 6
	host := worldtest.PerHost(3)
	count := func(s, d int) int { return (s*5 + d*3) % 7 * 301 } // elements s sends d; some 0
	for _, level := range []string{"off", "0", "2"} {
		t.Run("pxn="+level, func(t *testing.T) {
			vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "lo,eth,en", "FLEXLINK_PXN": level}
			worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: vars, Host: host}, New, func(c *Comm) error {
				ctx := context.Background()
				me := c.Rank()
				sc, rc := make([]int, n), make([]int, n)
				var send []int64
				for d := range n {
					sc[d], rc[d] = count(me, d), count(d, me)
					for i := range sc[d] {
						send = append(send, int64(me<<40|d<<20|i))
					}
				}
				recv := make([]int64, 0, n*7*301)
				for s := range n {
					recv = append(recv, make([]int64, rc[s])...)
				}
				if err := c.AllToAllv(ctx, Of(send), sc, Of(recv), rc); err != nil {
					return err
				}
				off := 0
				for s := range n {
					for i := range rc[s] {
						if want := int64(s<<40 | me<<20 | i); recv[off+i] != want {
							return fmt.Errorf("alltoallv: element %d from rank %d is %x, want %x", i, s, recv[off+i], want)
						}
					}
					off += rc[s]
				}
				const blk = 1000
				buf := make([]int32, n*blk)
				for i := range buf {
					buf[i] = int32(me*1_000_000 + i)
				}
				if err := c.AllToAll(ctx, Of(buf), Of(buf)); err != nil { // in place
					return err
				}
				for p := range n {
					for k := range blk {
						if want := int32(p*1_000_000 + me*blk + k); buf[p*blk+k] != want {
							return fmt.Errorf("alltoall in place: from %d element %d = %d, want %d", p, k, buf[p*blk+k], want)
						}
					}
				}
				st, used := c.PXNCounters()
				if used != (level != "off") {
					return fmt.Errorf("PXN used: %v (%s)", used, st)
				}
				return nil
			}))
		})
	}
}

// TestAllToAllPXNSubComm: a sub-communicator (every other rank of 2 hosts
// × 4) runs its all-to-all through its own proxy.
func TestAllToAllPXNSubComm(t *testing.T) {
	const n = 8
	host := worldtest.PerHost(4)
	vars := map[string]string{"FLEXLINK_NET": "tcp", "FLEXLINK_NET_IFNAME": "lo,eth,en", "FLEXLINK_PXN": "2"}
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n, Env: vars, Host: host}, New, func(c *Comm) error {
		ctx := context.Background()
		sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		m, me := sub.Size(), sub.Rank()
		const blk = 5000
		send, recv := make([]int32, m*blk), make([]int32, m*blk)
		for i := range send {
			send[i] = int32(me<<20 | i)
		}
		if err := sub.AllToAll(ctx, Of(send), Of(recv)); err != nil {
			return err
		}
		for p := range m {
			for k := range blk {
				if want := int32(p<<20 | me*blk + k); recv[p*blk+k] != want {
					return fmt.Errorf("sub-communicator alltoall: from %d element %d = %x, want %x", p, k, recv[p*blk+k], want)
				}
			}
		}
		if _, used := sub.PXNCounters(); !used {
			return fmt.Errorf("the sub-communicator did not use PXN")
		}
		return nil
	}))
}

// TestAllToAllInPlaceNoCopy: an in-place AllToAll that does not go through
// the PXN proxy (one host) makes no copy of its buffer: the copy the
// proxy needs was made before asking whether it applies, and cost a 64
// MiB in-place alltoall on one host 3/4 of its time (docs/PERF.md, "Host
// memory, eighteenth session"). The second call's bytes allocated by the
// whole process (both ranks) stay under one 4 MiB block (the copies were
// 16 MiB).
func TestAllToAllInPlaceNoCopy(t *testing.T) {
	const n, blk = 2, 1 << 20 // int32s per block: 4 MiB blocks, 8 MiB a rank
	var before, after runtime.MemStats
	worldtest.NoErrors(t, worldtest.Run(t, worldtest.Spec{N: n}, New, func(c *Comm) error {
		ctx := context.Background()
		buf := make([]int32, n*blk)
		for round := range 2 {
			for i := range buf {
				buf[i] = int32(c.Rank()*n*blk + i)
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			if round == 1 && c.Rank() == 0 {
				runtime.ReadMemStats(&before)
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			if err := c.AllToAll(ctx, Of(buf), Of(buf)); err != nil {
				return err
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			if round == 1 && c.Rank() == 0 {
				runtime.ReadMemStats(&after)
			}
			for p := range n {
				if want := int32(p*n*blk + c.Rank()*blk + 7); buf[p*blk+7] != want {
					return fmt.Errorf("round %d: from rank %d: %d, want %d", round, p, buf[p*blk+7], want)
				}
			}
		}
		return nil
	}))
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*blk { // the copy was 2 × 8 MiB
		t.Errorf("an in-place alltoall of %d MiB a rank allocated %d bytes, want well under one block (%d)", n*blk*4>>20, got, 4*blk)
	}
}
