package staged

import (
	"context"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
)

// cut is one call cut into chunks for the pipeline (pipeline.go): how much
// pinned staging it takes, and its stages on that memory. Every chunk has
// its own part of the staging, so the staging is the call's whole size,
// never more than the unpipelined call takes.
type cut struct {
	o          *plane.Op
	s          *gpu.Stream
	e          *collectives.Engine
	hostGroup  func(ctx context.Context, ps []collectives.P2P) error // the host Group (stagedPlane.hostGroup)
	rank, size int
	chunk      int // the plane's chunk in bytes
}

// pieces is how many chunks a message of l bytes is cut into: one unless
// it spans more than two chunks. Both ends of a send/recv compute it from
// the length, which they agree on.
func pieces(l, chunk int) int {
	if chunk <= 0 || l <= 2*chunk {
		return 1
	}
	return (l + chunk - 1) / chunk
}

// per is the chunk in bytes, whole elements.
func (k cut) per() int {
	sz := k.o.DT.Size()
	return max(1, k.chunk/sz) * sz
}

// span is chunk c of n bytes cut in chunks of per: offset and length.
func span(c, n, per int) (int, int) { return c * per, min(per, n-c*per) }

// staging is the pinned memory the call takes, in bytes.
func (k cut) staging() int {
	n := k.o.Count * k.o.DT.Size()
	switch k.o.Kind {
	case plane.Broadcast: // in place
		return n
	case plane.AllGather, plane.ReduceScatter: // in place on the host: size blocks
		return k.size * n
	case plane.Group:
		t := 0
		for _, e := range k.o.P2P {
			t += bufLen(e.Buf)
		}
		return t
	}
	return 2 * n // AllReduce, Reduce: send and recv (scratch on a reduce's non-roots)
}

func (k cut) stages(mem []byte) stages {
	switch k.o.Kind {
	case plane.AllGather, plane.ReduceScatter:
		return k.byBlock(mem)
	case plane.Group:
		return k.group(mem)
	}
	return k.slices(mem)
}

// slices cuts an allreduce, reduce or broadcast into slices of the buffer,
// each an allreduce, reduce or broadcast of its own. A broadcast runs in
// place in one staging; only the root copies in.
func (k cut) slices(mem []byte) stages {
	o, sz := k.o, k.o.DT.Size()
	n, per := o.Count*sz, k.per()
	from := o.Send
	var hs, hr []byte
	if o.Kind == plane.Broadcast {
		hs, hr = mem[:n], mem[:n]
		if o.Root != k.rank {
			from = nil
		}
	} else {
		hs, hr = mem[:n], mem[n:2*n]
	}
	st := stages{chunks: (n + per - 1) / per}
	if from != nil {
		st.in = func(c int) error {
			off, ln := span(c, n, per)
			return k.s.CopyDtoH(hs[off:off+ln], from.Sub(off, ln))
		}
	}
	st.host = func(ctx context.Context, c int) error {
		off, ln := span(c, n, per)
		b, r := collectives.HostBuffer(hs[off:off+ln]), collectives.HostBuffer(hr[off:off+ln])
		switch o.Kind {
		case plane.AllReduce:
			return k.e.AllReduce(ctx, b, r, ln/sz, o.DT, o.Op)
		case plane.Reduce:
			return k.e.Reduce(ctx, b, r, ln/sz, o.DT, o.Op, o.Root)
		}
		return k.e.Broadcast(ctx, r, r, ln/sz, o.DT, o.Root)
	}
	st.out = func(c int) error {
		if o.Recv == nil { // a reduce's non-roots
			return nil
		}
		off, ln := span(c, n, per)
		return k.s.CopyHtoD(o.Recv.Sub(off, ln), hr[off:off+ln])
	}
	return st
}

// blocks cuts each rank's block of blk bytes in chunks of per: part(c)
// is chunk c's part of the staging (size slots of ln bytes, for the bytes
// [off, off+ln) of every block), its offset and its length.
func (k cut) blocks(mem []byte) (blk, per int, part func(c int) ([]byte, int, int)) {
	blk, per = k.o.Count*k.o.DT.Size(), k.per()
	return blk, per, func(c int) ([]byte, int, int) {
		off, ln := span(c, blk, per)
		return mem[k.size*off : k.size*(off+ln)], off, ln
	}
}

// byBlock cuts an allgather or a reduce-scatter per block: chunk c is
// bytes [c*per, c*per+ln) of every rank's block, in its part of the
// staging (size slots of ln bytes), and one host collective of ln bytes a
// rank, in place there. An allgather copies this rank's send into its own
// slot and every slot out; a reduce-scatter copies every block in and
// this rank's slot (which keeps the result) out.
func (k cut) byBlock(mem []byte) stages {
	o, sz := k.o, k.o.DT.Size()
	blk, per, part := k.blocks(mem)
	gather := o.Kind == plane.AllGather
	// chunk returns chunk c's staging, this rank's slot of it and the
	// device range of its block q.
	chunk := func(c int) (r, mine []byte, dev func(b *gpu.Buffer, q int) *gpu.Buffer) {
		r, off, ln := part(c)
		return r, r[k.rank*ln : (k.rank+1)*ln], func(b *gpu.Buffer, q int) *gpu.Buffer { return b.Sub(q*blk+off, ln) }
	}
	return stages{
		chunks: (blk + per - 1) / per,
		in: func(c int) error {
			r, mine, dev := chunk(c)
			if gather {
				return k.s.CopyDtoH(mine, dev(o.Send, 0))
			}
			return k.eachSlot(r, func(q int, slot []byte) error { return k.s.CopyDtoH(slot, dev(o.Send, q)) })
		},
		host: func(ctx context.Context, c int) error {
			r, mine, _ := chunk(c)
			all, own := collectives.HostBuffer(r), collectives.HostBuffer(mine)
			if gather {
				return k.e.AllGather(ctx, own, all, len(mine)/sz, o.DT)
			}
			return k.e.ReduceScatter(ctx, all, own, len(mine)/sz, o.DT, o.Op)
		},
		out: func(c int) error {
			r, mine, dev := chunk(c)
			if gather {
				return k.eachSlot(r, func(q int, slot []byte) error { return k.s.CopyHtoD(dev(o.Recv, q), slot) })
			}
			return k.s.CopyHtoD(dev(o.Recv, 0), mine)
		},
	}
}

// eachSlot runs f on each of the size slots of r in rank order, up to the
// first error.
func (k cut) eachSlot(r []byte, f func(q int, slot []byte) error) error {
	ln := len(r) / k.size
	for q := range k.size {
		if err := f(q, r[q*ln:(q+1)*ln]); err != nil {
			return err
		}
	}
	return nil
}

// group cuts a group of sends and receives per message: a message of more
// than two chunks goes in chunks, piece j in round j; a smaller one goes
// whole in round 0. Round j is one host Group of every message's piece j.
// The two ends of a message cut it alike (pieces depends on its length
// only) and the engine matches a pair's transfers in order across Groups,
// so piece j meets piece j. Each message has its own staging, as in the
// unpipelined group.
func (k cut) group(mem []byte) stages {
	ents := k.o.P2P
	offs := make([]int, len(ents))
	rounds, at, sends := 0, 0, false
	for i, e := range ents {
		offs[i] = at
		at += bufLen(e.Buf)
		rounds = max(rounds, pieces(bufLen(e.Buf), k.chunk))
		sends = sends || e.Send
	}
	// piece is message i's piece j: offset and length, ok false if it has none.
	piece := func(i, j int) (off, ln int, ok bool) {
		l := bufLen(ents[i].Buf)
		switch n := pieces(l, k.chunk); {
		case j >= n:
			return 0, 0, false
		case n == 1:
			return 0, l, true
		}
		off, ln = span(j, l, k.chunk)
		return off, ln, true
	}
	hostPiece := func(i, off, ln int) []byte { return mem[offs[i]+off : offs[i]+off+ln] }
	copies := func(j int, send bool) error {
		for i, e := range ents {
			off, ln, ok := piece(i, j)
			if !ok || ln == 0 || e.Send != send {
				continue
			}
			var err error
			if send {
				err = k.s.CopyDtoH(hostPiece(i, off, ln), e.Buf.Sub(off, ln))
			} else {
				err = k.s.CopyHtoD(e.Buf.Sub(off, ln), hostPiece(i, off, ln))
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	st := stages{
		chunks: rounds,
		host: func(ctx context.Context, j int) error {
			var ps []collectives.P2P
			for i, e := range ents {
				if off, ln, ok := piece(i, j); ok {
					ps = append(ps, collectives.P2P{Send: e.Send, Peer: e.Peer, Buf: collectives.HostBuffer(hostPiece(i, off, ln))})
				}
			}
			return k.hostGroup(ctx, ps)
		},
		out: func(j int) error { return copies(j, false) },
	}
	if sends {
		st.in = func(j int) error { return copies(j, true) }
	}
	return st
}
