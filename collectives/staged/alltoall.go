package staged

import (
	"context"
	"fmt"
	"slices"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
)

// PXN is what the staged plane needs from its communicator to send an
// all-to-all across hosts through the PXN proxy (docs/PXN.md): the host
// all-to-all of byte blocks that follows the planner's routes
// (comm.Comm.PXNAllToAllv; send[d] goes to rank d, recv[s] takes rank s's
// block). ok false: PXN does not apply (FLEXLINK_PXN off, every rank on one
// host, no network transport) and the plane runs the host engine's
// all-to-all. A plane.Host without this method never uses PXN.
type PXN interface {
	PXNAllToAllv(ctx context.Context, send, recv [][]byte) (ok bool, err error)
}

// PXNGroup is what the staged plane needs from its communicator to send a
// group's staged messages through the PXN proxy's group service
// (comm.Comm.PXNGroup): a Group with collectives.Engine.Group's semantics that
// sends the messages whose route goes through a relay there, the others
// over the engine. A plane.Host without it runs the engine's Group.
type PXNGroup interface {
	PXNGroup(ctx context.Context, ops []collectives.P2P) error
}

// hostGroup runs a Group of staged (host) messages: through PXNGroup when
// the communicator offers it, else the engine.
func (p *stagedPlane) hostGroup(ctx context.Context, ps []collectives.P2P) error {
	if x, ok := p.c.(PXNGroup); ok {
		return x.PXNGroup(ctx, ps)
	}
	return p.c.Engine().Group(ctx, ps)
}

// RunsAllToAllv says the staged plane takes plane.AllToAllv as one call
// (plane.VPlane), so that it can go through the PXN proxy.
func (p *stagedPlane) RunsAllToAllv() bool { return true }

// alltoall runs AllToAll and AllToAllv: the send blocks are copied into
// pinned host memory, exchanged by the host (through the PXN proxy when it
// applies, else the engine), and the received blocks copied back. The
// relay's hand-off is over shared memory, from the staging copy: the
// faster path for GPU ranks (the sender copying over NVLink/CUDA IPC into
// the relay's GPU staging, the relay's proxy sending from there with
// GPUDirect RDMA) needs a network provider that reads device memory.
func (p *stagedPlane) alltoall(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	if x, ok := p.c.(PXNHandoff); ok && (p.ho == nil || !p.ho.off) {
		via, use, err := x.PXNHandoff(ctx)
		if err != nil {
			return p.fail(o, "PXN", err)
		}
		if use {
			if p.ho == nil {
				p.ho = &handoffState{p: p, views: map[int]handoffView{}}
			}
			return p.ho.run(ctx, o, s, x, via)
		}
	}
	if o.Kind == plane.AllToAll && o.Count*o.DT.Size() >= 2*roundBytes {
		return p.alltoallRounds(ctx, o, s)
	}
	sl, rl := o.SendBytes, o.RecvBytes
	if o.Kind == plane.AllToAll {
		sl = slices.Repeat([]int{o.Count * o.DT.Size()}, p.c.Size())
		rl = sl
	}
	ns, nr := total(sl), total(rl)
	mem, err := p.staging(ns + nr)
	if err != nil {
		return p.fail(o, "pinned staging", err)
	}
	hs, hr := mem[:ns:ns], mem[ns:]
	if ns > 0 {
		if err := s.CopyDtoH(hs, o.Send); err != nil {
			return p.fail(o, "copy send to host", err)
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return p.fail(o, "copy send to host", err)
	}
	if err := p.exchange(ctx, o, hs, hr, sl, rl); err != nil {
		return err
	}
	return p.unstage(ctx, o, s, hr)
}

// unstage copies the received blocks (hr, pinned) to the GPU and waits:
// the staging memory is reused by the next call.
func (p *stagedPlane) unstage(ctx context.Context, o *plane.Op, s *gpu.Stream, hr []byte) error {
	if len(hr) > 0 {
		if err := s.CopyHtoD(o.Recv, hr); err != nil {
			return p.fail(o, "copy recv to gpu", err)
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return p.fail(o, "copy recv to gpu", err)
	}
	return nil
}

// exchange moves the staged blocks: through the PXN proxy when the
// communicator offers it and it applies, else over the host engine.
func (p *stagedPlane) exchange(ctx context.Context, o *plane.Op, hs, hr []byte, sl, rl []int) error {
	if x, ok := p.c.(PXN); ok {
		if used, err := x.PXNAllToAllv(ctx, split(hs, sl), split(hr, rl)); used {
			return err
		}
	}
	e := p.c.Engine()
	if o.Kind == plane.AllToAll {
		return e.AllToAll(ctx, collectives.HostBuffer(hs), collectives.HostBuffer(hr), o.Count, o.DT)
	}
	var ops []collectives.P2P
	send, recv := split(hs, sl), split(hr, rl)
	for q := range send {
		if len(send[q]) > 0 {
			ops = append(ops, collectives.P2P{Send: true, Peer: q, Buf: collectives.HostBuffer(send[q])})
		}
		if len(recv[q]) > 0 {
			ops = append(ops, collectives.P2P{Peer: q, Buf: collectives.HostBuffer(recv[q])})
		}
	}
	return e.Group(ctx, ops)
}

func (p *stagedPlane) fail(o *plane.Op, what string, err error) error {
	return fmt.Errorf("rank %d on %s: gpu %s: %s on %s: %w", p.c.Rank(), p.c.Host(), o.Kind, what, p.dev, err)
}

// split cuts b into blocks of the given lengths.
func split(b []byte, lens []int) [][]byte {
	out := make([][]byte, len(lens))
	off := 0
	for i, l := range lens {
		out[i] = b[off : off+l : off+l]
		off += l
	}
	return out
}

func total(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// roundBytes is how much of every block one round of a pipelined
// AllToAll moves.
const roundBytes = 4 << 20

// alltoallRounds runs an AllToAll whose blocks hold at least two rounds (so its
// staging, two slots of a round's send and receive blocks, is no larger
// than the unpipelined call's) in rounds:
// round k moves bytes [k*c, (k+1)*c) of every block (c is roundBytes in
// whole elements), each round one host all-to-all (through the PXN proxy
// when it applies). Two staging slots alternate, so the copies of round
// k+1 to the host run on the GPU's copy engine while round k crosses the
// network, and round k's copies back to the GPU while round k+1 does.
// Every rank computes the same rounds from the count. Send may equal Recv:
// round k's copy back overwrites only bytes that round k already read.
func (p *stagedPlane) alltoallRounds(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	n, sz := p.c.Size(), o.DT.Size()
	blk := o.Count * sz
	c := roundBytes / sz * sz
	rounds := (blk + c - 1) / c
	mem, err := p.staging(4 * n * c)
	if err != nil {
		return p.fail(o, "pinned staging", err)
	}
	type slot struct {
		hs, hr []byte
		ev     *gpu.Event // recorded after the slot's copies to the host
	}
	var slots [2]slot
	for i := range slots {
		base := mem[2*i*n*c : 2*(i+1)*n*c]
		slots[i].hs, slots[i].hr = base[:n*c:n*c], base[n*c:]
		if slots[i].ev, err = p.dev.NewEvent(false); err != nil {
			return p.fail(o, "staging event", err)
		}
		defer func(e *gpu.Event) { _ = e.Close() }(slots[i].ev)
	}
	width := func(k int) int { return min(c, blk-k*c) }
	// load enqueues round k's copies to the host and records its event.
	// The slot's previous round (k-2) has been exchanged and its copies
	// back were enqueued before, so the stream orders them.
	load := func(k int) error {
		sl, w := &slots[k%2], width(k)
		for d := range n {
			if err := s.CopyDtoH(sl.hs[d*w:(d+1)*w], o.Send.Sub(d*blk+k*c, w)); err != nil {
				return err
			}
		}
		return s.Record(sl.ev)
	}
	for k := range min(rounds, 2) {
		if err := load(k); err != nil {
			return p.fail(o, fmt.Sprintf("copy round %d to host", k), err)
		}
	}
	for k := range rounds {
		sl, w := &slots[k%2], width(k)
		if err := waitEvent(ctx, sl.ev); err != nil {
			return p.fail(o, fmt.Sprintf("copy round %d to host", k), err)
		}
		ws := slices.Repeat([]int{w}, n)
		ro := &plane.Op{Kind: plane.AllToAll, Count: w / sz, DT: o.DT}
		if err := p.exchange(ctx, ro, sl.hs[:n*w], sl.hr[:n*w], ws, ws); err != nil {
			return fmt.Errorf("round %d of %d: %w", k, rounds, err)
		}
		for src := range n {
			if err := s.CopyHtoD(o.Recv.Sub(src*blk+k*c, w), sl.hr[src*w:(src+1)*w]); err != nil {
				return p.fail(o, fmt.Sprintf("copy round %d to gpu", k), err)
			}
		}
		if k+2 < rounds {
			if err := load(k + 2); err != nil {
				return p.fail(o, fmt.Sprintf("copy round %d to host", k+2), err)
			}
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return p.fail(o, "copy recv to gpu", err)
	}
	return nil
}
