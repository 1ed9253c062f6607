package plane

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
)

// VPlane is a Plane that runs AllToAllv as one collective call (the staged
// plane, which sends it through the PXN proxy when FLEXLINK_PXN applies).
// On other planes DeviceComm.AllToAllv runs as a copy of the rank's own
// block and a Group of sends and receives.
type VPlane interface {
	Plane
	RunsAllToAllv() bool
}

// AllToAllv sends sendCounts[j] elements to rank j and receives
// recvCounts[i] elements from rank i (MPI_Alltoallv without
// displacements: the blocks lie one after another in rank order, in send
// and in recv). sendCounts[j] on this rank must equal recvCounts[this
// rank] on rank j. send and recv must not overlap. A buffer may be nil
// when its counts are all 0.
func (d *DeviceComm) AllToAllv(ctx context.Context, send, recv *gpu.Buffer, sendCounts, recvCounts []int, dt dtype.DType, s *gpu.Stream) error {
	const what = "gpu alltoallv"
	n, me := d.c.Size(), d.c.Rank()
	if !dt.Valid() {
		return fmt.Errorf("rank %d: %s: invalid dtype %v", me, what, dt)
	}
	if len(sendCounts) != n || len(recvCounts) != n {
		return fmt.Errorf("rank %d: %s: %d send counts and %d receive counts for %d ranks", me, what, len(sendCounts), len(recvCounts), n)
	}
	if s == nil || s.Device() != d.dev {
		return fmt.Errorf("rank %d: %s: stream is not on %s", me, what, d.dev)
	}
	sl, ns, err := countBytes(sendCounts, dt.Size())
	if err != nil {
		return fmt.Errorf("rank %d: %s: send %w", me, what, err)
	}
	rl, nr, err := countBytes(recvCounts, dt.Size())
	if err != nil {
		return fmt.Errorf("rank %d: %s: receive %w", me, what, err)
	}
	if sl[me] != rl[me] {
		return fmt.Errorf("rank %d: %s: sends %d bytes to itself but receives %d", me, what, sl[me], rl[me])
	}
	if send, err = d.trim(what+" send", send, ns); err != nil {
		return err
	}
	if recv, err = d.trim(what+" recv", recv, nr); err != nil {
		return err
	}
	r := d.record()
	defer d.release(r)
	r.op, r.s = Op{Kind: AllToAllv, Send: send, Recv: recv, Count: ns / dt.Size(), DT: dt, SendBytes: sl, RecvBytes: rl}, s
	o := &r.op
	if vp, ok := d.plane.(VPlane); ok && vp.RunsAllToAllv() {
		if err := d.captureOf(o, s); err != nil {
			return err
		}
		return d.run(ctx, what, r)
	}
	g, self, selfRecv := asGroup(o, me)
	if len(g.P2P) > 0 {
		if err := d.captureOf(g, s); err != nil {
			return err
		}
	}
	return d.c.Run(ctx, what, func(ctx context.Context) error {
		if self != nil {
			if err := s.CopyDtoD(selfRecv, self); err != nil {
				return fmt.Errorf("rank %d: %s: own block: %w", me, what, err)
			}
		}
		if len(g.P2P) == 0 {
			return nil
		}
		return d.do(ctx, g, s)
	})
}

// countBytes turns element counts into byte counts and their sum.
func countBytes(counts []int, size int) ([]int, int, error) {
	out := make([]int, len(counts))
	sum := 0
	for i, c := range counts {
		if c < 0 {
			return nil, 0, fmt.Errorf("count %d for rank %d", c, i)
		}
		out[i] = c * size
		sum += out[i]
	}
	return out, sum, nil
}

// trim checks b (n bytes needed; nil is fine for 0) and cuts it to n.
func (d *DeviceComm) trim(what string, b *gpu.Buffer, n int) (*gpu.Buffer, error) {
	if b == nil && n == 0 {
		return nil, nil
	}
	if err := d.local(what, b, n); err != nil {
		return nil, err
	}
	return b.Sub(0, n), nil
}

// asGroup is o as a Group of sends and receives with every peer but me,
// and the rank's own block (send and recv sides; nil when empty).
func asGroup(o *Op, me int) (g *Op, self, selfRecv *gpu.Buffer) {
	g = &Op{Kind: Group, DT: dtype.Uint8}
	so, ro := 0, 0
	for p := range o.SendBytes {
		sl, rl := o.SendBytes[p], o.RecvBytes[p]
		switch {
		case p == me:
			if sl > 0 { // == rl (checked)
				self, selfRecv = o.Send.Sub(so, sl), o.Recv.Sub(ro, rl)
			}
		default:
			if sl > 0 {
				g.P2P = append(g.P2P, SendTo(p, o.Send.Sub(so, sl)))
			}
			if rl > 0 {
				g.P2P = append(g.P2P, RecvFrom(p, o.Recv.Sub(ro, rl)))
			}
		}
		so, ro = so+sl, ro+rl
	}
	return g, self, selfRecv
}
