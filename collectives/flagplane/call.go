package flagplane

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
)

// One flag call (flag.go says what the flag plane is): the kernel for the
// collective, its grid and chunk, the PCIe part's split (pcie.go),
// and the order against the previous flag kernel.

// Call enqueues o as one flag kernel (three for a two-shot allreduce),
// making the region it needs first when no call has (lazy.go).
func (f *Plane) Call(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	// the caller has checked f.Err already
	if se := f.c.JobErr(); se != nil {
		return se // the job is aborted (before this plane's first call too): the watcher ends the kernels
	}
	capID, side := o.Capture, o.Self // o is rewritten below for send/recv
	if capID != 0 {
		if err := f.captureBegin(capID, s); err != nil { // capture.go
			return err
		}
	} else if f.lastS != nil && f.lastS != s || f.capt.any {
		if err := s.Wait(f.last); err != nil {
			return err
		}
	}
	p2p, xchg := o.Kind == plane.Group, o.Kind == plane.Group && len(o.P2P) == 2 // f.p2p
	switch {
	case xchg:
		snd, rcv := o.P2P[0], o.P2P[1]
		if !snd.Send {
			snd, rcv = rcv, snd
		}
		o = &plane.Op{Kind: plane.Broadcast, Send: snd.Buf, Recv: rcv.Buf, Count: snd.Buf.Len(), DT: dtype.Uint8, Root: -1}
	case p2p:
		e, root := o.P2P[0], f.me
		if !e.Send {
			root = e.Peer
		}
		o = &plane.Op{Kind: plane.Broadcast, Send: e.Buf, Recv: e.Buf, Count: e.Buf.Len(), DT: dtype.Uint8, Root: root}
	}
	sz := o.DT.Size()
	bytes := o.Count * sz
	g, err := f.regionFor(ctx, o, bytes)
	if err != nil {
		return err
	}
	if se := f.c.JobErr(); se != nil {
		return se // aborted while the region was made
	}
	l := g.layout
	x := f.pcie
	if x == nil || g != &f.regions[1] || o.Kind != plane.AllReduce || capID != 0 {
		x = nil // no PCIe part for this call (CaptureBlocker refused the calls that would have one)
	} else {
		l.MaxBlocks = x.nvcap // the PCIe blocks run beside, one per SM
	}
	unit := sz // allgather, alltoall and broadcast move bytes
	if o.Kind == plane.AllGather || o.Kind == plane.AllToAll || o.Kind == plane.Broadcast {
		unit = 1
	}
	ll := f.llBlocks(l)
	if x != nil {
		ll = 0 // the PCIe part's grid is fixed; its calls are large
	}
	grid, chunk := shape(l, bytes, unit, ll)
	var pc gpu.FlagPCIe
	if x != nil {
		// The inbox slots are per PCIe block, their counters per launched
		// block: the NVLink grid must not change between such calls (it is
		// nvcap for every call of 32 MiB and more).
		if grid != x.nvcap {
			return fmt.Errorf("flag allreduce of %d bytes: grid %d, want %d beside the pcie part (internal)", bytes, grid, x.nvcap)
		}
		pc = x.plan(f.calls+1, o.Count, sz)
	}
	switch {
	case o.Kind == plane.AllReduce && f.n > 2 && bytes > f.lim.oneShot: // (the PCIe part needs two ranks: x is nil)
		f.twoShots++
		err = f.twoShot(o, s, g)
	case o.Kind == plane.AllReduce:
		err = s.FlagAllReduce(o.Recv, o.Send, o.Count, o.DT, o.Op, g.mem, g.layout, chunk, grid, f.n, pc)
	case o.Kind == plane.ReduceScatter:
		err = s.FlagReduceScatter(o.Recv, o.Send, o.Count, o.DT, o.Op, g.mem, g.layout, chunk, grid, f.n)
	case o.Kind == plane.Reduce:
		out := o.Recv // nil off root, where the kernel writes nothing
		if out == nil {
			out = o.Send
		}
		err = s.FlagReduce(out, o.Send, o.Count, o.DT, o.Op, o.Root, g.mem, g.layout, chunk, grid, f.n)
	case xchg:
		err = s.FlagExchange(o.Recv, o.Send, bytes, g.mem, g.layout, chunk, grid, side)
	case p2p:
		err = s.FlagSendRecv(o.Recv, bytes, o.Root, g.mem, g.layout, chunk, grid, side)
	case o.Kind == plane.Broadcast:
		in := o.Send // nil off root, where the kernel reads nothing
		if in == nil {
			in = o.Recv
		}
		err = s.FlagBroadcast(o.Recv, in, bytes, o.Root, g.mem, g.layout, chunk, grid, f.n)
	default:
		err = s.FlagGather(o.Recv, o.Send, bytes, o.Kind == plane.AllToAll, g.mem, g.layout, chunk, grid, f.n)
	}
	if err != nil {
		// A two-shot call may have enqueued some of its kernels: Close
		// (and any later call on another stream) still waits for them.
		if capID != 0 {
			f.recordCaptured(s, 0)
		} else if s.Record(f.last) == nil {
			f.lastS = s
		}
		return err
	}
	if capID != 0 {
		// Each replay records last (capture.go); the host's count and
		// link shares describe eager calls only.
		if o.Kind == plane.AllReduce && f.n > 2 && bytes > f.lim.oneShot {
			grid = 0 // a two-shot call: several kernels
		}
		return f.recordCaptured(s, grid)
	}
	pbytes := 0
	switch {
	case x != nil && f.me == 0:
		pbytes = pc.Count * sz
		x.launched(pc.Call, grid+pc.Blocks, grid, bytes, pbytes)
	case x != nil:
		pbytes = min(x.lastPCIe(), o.Count) * sz // the previous call's, as rank 0's kernel told this one
	}
	if err := s.Record(f.last); err != nil {
		return err
	}
	f.lastS = s
	f.calls++
	if (o.Kind == plane.Broadcast && o.Root >= 0 && f.me != o.Root) || (o.Kind == plane.Reduce && f.me == o.Root) {
		bytes = 0 // a broadcast's non-root or a reduce's root pushed headers only
	}
	f.count(int64(bytes-pbytes), int64(pbytes))
	return nil
}

// twoShot enqueues a flag allreduce of more than two ranks as a
// reduce-scatter kernel (rank r reduces block r of the vector into its
// place in recv) then an allgather kernel (in place in recv), plus a
// one-shot kernel for the few elements past the last whole block. Each
// rank sends 2(n-1)/n of the vector instead of the one-shot's n-1 times
// it. Blocks are whole multiples of flagTwoShotAlign bytes, so every
// rank's block starts vector-aligned.
func (f *Plane) twoShot(o *plane.Op, s *gpu.Stream, g *flagRegion) error {
	sz := o.DT.Size()
	per := o.Count / f.n / (flagTwoShotAlign / sz) * (flagTwoShotAlign / sz)
	head := per * f.n
	if per > 0 {
		grid, chunk := shape(g.layout, per*sz, sz, f.llBlocks(g.layout)) // each peer transfer is one block of per elements
		mine := sub(o.Recv, f.me*per, (f.me+1)*per, sz)
		if err := s.FlagTwoShotReduceScatter(mine, o.Send.Sub(0, head*sz), per, o.DT, o.Op, g.mem, g.layout, chunk, grid, f.n); err != nil {
			return err
		}
		grid, chunk = shape(g.layout, per*sz, 1, f.llBlocks(g.layout))
		if err := s.FlagTwoShotGather(o.Recv.Sub(0, head*sz), mine, per*sz, g.mem, g.layout, chunk, grid, f.n); err != nil {
			return err
		}
	}
	if rest := o.Count - head; rest > 0 {
		grid, chunk := shape(g.layout, rest*sz, sz, f.llBlocks(g.layout))
		return s.FlagTwoShotTail(sub(o.Recv, head, o.Count, sz), sub(o.Send, head, o.Count, sz), rest, o.DT, o.Op,
			g.mem, g.layout, chunk, grid, f.n)
	}
	return nil
}

// sub is elements [a, b) of buf, of sz bytes each.
func sub(buf *gpu.Buffer, a, b, sz int) *gpu.Buffer { return buf.Sub(a*sz, (b-a)*sz) }
