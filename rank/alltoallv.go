package rank

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/proxy"
)

// AllToAllv sends sendCounts[j] elements to rank j and receives
// recvCounts[i] elements from rank i (MPI_Alltoallv without
// displacements: the blocks lie one after another in rank order).
// sendCounts[j] on this rank must equal recvCounts[this rank] on rank j.
// With FLEXLINK_PXN set, blocks for other hosts follow the PXN routes
// (docs/PXN.md); otherwise it is a group of sends and receives.
func (c *Comm) AllToAllv(ctx context.Context, send Data, sendCounts []int, recv Data, recvCounts []int) error {
	n := c.c.Size()
	if len(sendCounts) != n || len(recvCounts) != n {
		return fmt.Errorf("alltoallv: %d send counts and %d receive counts for %d ranks", len(sendCounts), len(recvCounts), n)
	}
	tot := func(v []int, what string) (int, error) {
		s := 0
		for i, x := range v {
			if x < 0 {
				return 0, fmt.Errorf("alltoallv: %s count %d for rank %d", what, x, i)
			}
			s += x
		}
		return s, nil
	}
	ns, err := tot(sendCounts, "send")
	if err != nil {
		return err
	}
	nr, err := tot(recvCounts, "receive")
	if err != nil {
		return err
	}
	if err := firstErr(send.check("alltoallv send", ns), recv.check("alltoallv recv", nr), sameType(send, recv)); err != nil {
		return err
	}
	es := send.Type.Size()
	bytes := func(v []int) []int {
		out := make([]int, len(v))
		for i, x := range v {
			out[i] = x * es
		}
		return out
	}
	sl, rl := bytes(sendCounts), bytes(recvCounts)
	return c.c.Run(ctx, "alltoallv", func(ctx context.Context) error {
		if ok, err := c.pxnAllToAll(ctx, send.buf(), recv.buf(), sl, rl); ok {
			return err
		}
		var ops []collectives.P2P
		so, ro := 0, 0
		for p := range n {
			if sl[p] > 0 {
				ops = append(ops, collectives.P2P{Send: true, Peer: p, Buf: send.buf().Slice(so, sl[p])})
			}
			if rl[p] > 0 {
				ops = append(ops, collectives.P2P{Peer: p, Buf: recv.buf().Slice(ro, rl[p])})
			}
			so, ro = so+sl[p], ro+rl[p]
		}
		return c.c.Engine().Group(ctx, ops)
	})
}

// pxnAllToAll runs the all-to-all through the PXN proxy when it applies
// (host buffers, FLEXLINK_PXN set, members on several hosts): ok true.
func (c *Comm) pxnAllToAll(ctx context.Context, send, recv collectives.Buffer, sl, rl []int) (ok bool, err error) {
	sb, ok1 := send.(collectives.HostBuffer)
	rb, ok2 := recv.(collectives.HostBuffer)
	if !ok1 || !ok2 {
		return false, nil
	}
	if used, err := c.c.PXNUsed(ctx); !used || err != nil { // before the copy below: a copy of send for nothing cost a 64 MiB in-place alltoall on one host 3/4 of its time
		return err != nil, err
	}
	if len(sb) > 0 && len(rb) > 0 && &sb[0] == &rb[0] { // in place: the proxy reads send while recv fills
		sb = append(collectives.HostBuffer(nil), sb...)
	}
	s, r := make([][]byte, len(sl)), make([][]byte, len(rl))
	so, ro := 0, 0
	for p := range sl {
		s[p], r[p] = sb[so:so+sl[p]], rb[ro:ro+rl[p]]
		so, ro = so+sl[p], ro+rl[p]
	}
	return c.c.PXNAllToAllv(ctx, s, r)
}

// PXNCounters returns the PXN proxy's counters summed over every call
// (bytes sent on this rank's NIC, messages, relayed, receives posted and
// their buffers), and false when the communicator has not used PXN.
func (c *Comm) PXNCounters() (proxy.Stats, bool) { return c.c.PXNStats() }
