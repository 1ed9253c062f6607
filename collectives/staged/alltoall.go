package staged

import (
	"context"
	"fmt"
	"slices"

	"flexlink/collectives"
	"flexlink/collectives/plane"
	"flexlink/gpu"
)

// PXN is what the staged plane needs from its communicator to send an
// all-to-all across hosts through the PXN proxy (docs/PXN.md): the host
// all-to-all of byte blocks that follows the planner's routes
// (comm.PXNAllToAllv; send[d] goes to rank d, recv[s] takes rank s's
// block). ok false: PXN does not apply (FLEXLINK_PXN off, every rank on one
// host, no network transport) and the plane runs the host engine's
// all-to-all. A plane.Host without this method never uses PXN.
type PXN interface {
	PXNAllToAllv(ctx context.Context, send, recv [][]byte) (ok bool, err error)
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
	if nr > 0 {
		if err := s.CopyHtoD(o.Recv, hr); err != nil {
			return p.fail(o, "copy recv to gpu", err)
		}
	}
	// The staging memory is reused by the next call: wait for the copy.
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
