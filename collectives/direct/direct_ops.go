package direct

import (
	"fmt"

	"flexlink/collectives/plane"
	"flexlink/gpu"
	"flexlink/internal/errs"
)

// Data movement of the direct plane. By the time work runs, the caller's
// stream s waits on every peer's "ready" event, so anything enqueued on s
// (or on a copy stream released by an event recorded on s) may touch the
// peers' buffers; the "done" handshake after it covers everything joined
// back into s.
//
// All algorithms are "direct" (one hop): with NVLink or NVSwitch between
// every pair there is no ring to walk. Bulk bytes go over copy engines
// (cuMemcpyAsync on IPC-mapped peer memory) or, for allgather and alltoall,
// SM kernels that store into the peers' recv (store mode, the default) or
// read the peers' blocks (pull mode, gpu_direct_pull.go); the allreduce
// normally runs as a flag kernel (gpu_flag.go); reductions run in kernels that
// read the peers' buffers in place. Each rank owns 1/N of a reduced vector,
// so every element is reduced by exactly one rank and all ranks end with
// the same bits.

const (
	blockAlign = 256     // bytes: block and chunk starts stay vector-aligned for the kernels
	fanOutMin  = 1 << 20 // bytes: smaller pushes stay on s (one stream, fewest driver calls)
	minSlice   = 4 << 20 // bytes: a push is split over copy lanes only in slices at least this big
)

// work enqueues o's data movement; in[j] is peer j's ready message.
func (p *directPlane) work(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	switch o.Kind {
	case plane.AllReduce:
		return p.allReduce(o, s, in)
	case plane.ReduceScatter:
		return p.reduceScatter(o, s, in)
	case plane.AllGather, plane.AllToAll:
		if err := p.checkModes(o, in); err != nil {
			return err
		}
		p.stores = o.Kind == plane.AllGather && p.agStore || o.Kind == plane.AllToAll && p.a2aStore
		defer func() { p.stores = false }()
		switch {
		case o.Kind == plane.AllGather && p.agPull:
			return p.allGatherPull(o, s, in)
		case o.Kind == plane.AllGather:
			return p.allGather(o, s, in)
		case p.a2aPull:
			return p.allToAllPull(o, s, in)
		}
		return p.allToAll(o, s, in)
	case plane.Broadcast:
		return p.broadcast(o, s, in)
	case plane.Reduce:
		return p.reduce(o, s, in)
	case plane.Group:
		return p.group(o, s, in)
	}
	return fmt.Errorf("gpu: unknown collective %d", o.Kind)
}

// remote maps descriptor k of peer j's ready message.
func (p *directPlane) remote(in [][]byte, j, k int) (*gpu.Buffer, error) {
	return p.ipc.open(j, getDesc(in[j][readyHeader+k*descBytes:]))
}

// remotes maps descriptor k of every peer's ready message (nil for me).
func (p *directPlane) remotes(in [][]byte, k int) ([]*gpu.Buffer, error) {
	out := make([]*gpu.Buffer, p.n)
	for j := 0; j < p.n; j++ {
		if j == p.me {
			continue
		}
		b, err := p.remote(in, j, k)
		if err != nil {
			return nil, err
		}
		out[j] = b
	}
	return out, nil
}

// blockRange is rank r's block [lo, hi) of count elements split n ways,
// each block a multiple of blockAlign bytes except the last ones.
func blockRange(count, n, r, sz int) (lo, hi int) {
	g := max(1, blockAlign/sz)
	per := (count + n - 1) / n
	per = (per + g - 1) / g * g
	lo = min(count, r*per)
	return lo, min(count, lo+per)
}

// chunkElems is the pipeline chunk for a block of blockBytes: about an
// eighth of the block (so filling the pipeline costs ~1/8 of the time),
// between a quarter of FLEXLINK_GPU_CHUNK_BYTES and all of it, in whole
// aligned units. Below 4 MiB (the default's quarter) each chunk's driver
// calls cost more host time than the overlap saves GPU time (measured on
// 2×H200: a 4 MiB allreduce in 1 MiB chunks took 56 µs).
func (p *directPlane) chunkElems(blockBytes, sz int) int {
	cs := min(p.chunkMax, max(blockBytes/8, p.chunkMax/4))
	cs = max(blockAlign, cs/blockAlign*blockAlign)
	return cs / sz
}

func sameMem(a, b *gpu.Buffer) bool { return a.Ptr() == b.Ptr() && a.Len() == b.Len() }

// sub is elements [a, b) of buf.
func sub(buf *gpu.Buffer, a, b, sz int) *gpu.Buffer { return buf.Sub(a*sz, (b-a)*sz) }

// reduceInto enqueues dst = mine op peers[j]... over elements [a, b) of
// mine and of every peer buffer, then op's final step (Avg's division).
// With no peers it copies.
func (p *directPlane) reduceInto(s *gpu.Stream, dst, mine *gpu.Buffer, peers []*gpu.Buffer, a, b int, o *plane.Op) error {
	sz, cnt := o.DT.Size(), b-a
	src := sub(mine, a, b, sz)
	first := true
	for _, j := range p.rotated() {
		pb := peers[j]
		if pb == nil {
			continue
		}
		if err := s.Reduce(dst, src, sub(pb, a, b, sz), cnt, o.DT, o.Op); err != nil {
			return err
		}
		src, first = dst, false
	}
	if first && !sameMem(dst, src) {
		return s.CopyDtoD(dst, src)
	}
	return s.Finish(dst, cnt, o.DT, o.Op, p.n)
}

// allReduce is two-shot: rank i reduces block i reading the peers' send
// buffers over NVLink into its own recv, then pushes the reduced block into
// every peer's recv with the copy engines. Large blocks go in chunks: the
// kernel reduces chunk k+1 on s while the copy streams push chunk k.
func (p *directPlane) allReduce(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	sends, err := p.remotes(in, 0)
	if err != nil {
		return err
	}
	recvs, err := p.remotes(in, 1)
	if err != nil {
		return err
	}
	sz := o.DT.Size()
	lo, hi := blockRange(o.Count, p.n, p.me, sz)
	if hi <= lo {
		return nil
	}
	ce := p.chunkElems((hi-lo)*sz, sz)
	piped := hi-lo > ce && p.n > 1
	for a := lo; a < hi; a += ce {
		b := min(hi, a+ce)
		dst := sub(o.Recv, a, b, sz)
		if err := p.reduceInto(s, dst, o.Send, sends, a, b, o); err != nil {
			return err
		}
		if piped {
			if err := s.Record(p.startEv); err != nil {
				return err
			}
		}
		for _, j := range p.rotated() {
			var err error
			if piped {
				err = p.pushSplit(j, 0, a*sz, sub(recvs[j], a, b, sz), dst, p.startEv)
			} else {
				err = p.pushOn(s, sub(recvs[j], a, b, sz), dst)
			}
			if err != nil {
				return err
			}
		}
	}
	if piped {
		return p.joinCopies(s)
	}
	return nil
}

// copyPair is one push: dst (peer memory, at offset off of the peer's
// recv buffer) = src.
type copyPair struct {
	dst, src *gpu.Buffer
	off      int
}

// pushOn enqueues a small push on s itself (counted as NVLink bytes).
func (p *directPlane) pushOn(s *gpu.Stream, dst, src *gpu.Buffer) error {
	p.px.cur[linkNVLink] += int64(dst.Len())
	if p.stores && aligned16(dst, src) {
		return s.Copy(dst, src)
	}
	return s.CopyDtoD(dst, src)
}

// pushes enqueues one copy per peer plus this rank's local part. Large
// pushes each get their peer's copy stream, so the copy engines toward
// different peers and the local copy on s run at once, and give their PCIe
// share to the staged path (pushSplit); small ones stay on s, where fewer
// driver calls mean less latency.
func (p *directPlane) pushes(s *gpu.Stream, cs []*copyPair, local func() error) error {
	total := 0
	for _, c := range cs {
		if c != nil {
			total += c.src.Len()
		}
	}
	if total < fanOutMin {
		for _, j := range p.rotated() {
			if c := cs[j]; c != nil {
				if err := p.pushOn(s, c.dst, c.src); err != nil {
					return err
				}
			}
		}
		return local()
	}
	if err := s.Record(p.startEv); err != nil {
		return err
	}
	for _, j := range p.rotated() {
		c := cs[j]
		if c == nil {
			continue
		}
		if err := p.pushSplit(j, 0, c.off, c.dst, c.src, p.startEv); err != nil {
			return err
		}
	}
	if err := local(); err != nil {
		return err
	}
	return p.joinCopies(s)
}

// allGather pushes this rank's send into block Rank() of every peer's recv.
func (p *directPlane) allGather(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	recvs, err := p.remotes(in, 1)
	if err != nil {
		return err
	}
	blk := o.Count * o.DT.Size()
	cs := make([]*copyPair, p.n)
	for j, r := range recvs {
		if r != nil {
			cs[j] = &copyPair{dst: r.Sub(p.me*blk, blk), src: o.Send, off: p.me * blk}
		}
	}
	mine := o.Recv.Sub(p.me*blk, blk)
	if p.stores && !sameMem(mine, o.Send) && (p.n-1)*blk >= fanOutMin {
		return p.allGatherStore(s, cs, mine, o.Send)
	}
	return p.pushes(s, cs, func() error {
		if sameMem(mine, o.Send) {
			return nil
		}
		return s.CopyDtoD(mine, o.Send)
	})
}

// allGatherStore is the large out-of-place store allgather: the kernel
// that pushes to the first peer also writes this rank's own block (one
// read of send, no copy engine competing with the kernel for memory), the
// other peers get store kernels of their own, and the PCIe parts go to the
// staged path; the own block's bytes that match the first peer's PCIe
// part are copied on s.
func (p *directPlane) allGatherStore(s *gpu.Stream, cs []*copyPair, mine, send *gpu.Buffer) error {
	if err := s.Record(p.startEv); err != nil {
		return err
	}
	blk, local, fused := send.Len(), 0, false
	for _, j := range p.rotated() {
		c := cs[j]
		if c == nil {
			continue
		}
		if fused {
			if err := p.pushSplit(j, 0, c.off, c.dst, c.src, p.startEv); err != nil {
				return err
			}
			continue
		}
		nv, err := p.pushSplitWith(j, c.off, c.dst, c.src, p.startEv, func(d, s *gpu.Buffer) error {
			return p.copy2On(j, d, mine.Sub(0, d.Len()), s, p.startEv)
		})
		if err != nil {
			return err
		}
		local, fused = nv, nv > 0
	}
	if local < blk {
		if err := s.CopyDtoD(mine.Sub(local, blk-local), send.Sub(local, blk-local)); err != nil {
			return err
		}
	}
	return p.joinCopies(s)
}

// allToAll pushes send block j into block Rank() of peer j's recv.
func (p *directPlane) allToAll(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	recvs, err := p.remotes(in, 1)
	if err != nil {
		return err
	}
	blk := o.Count * o.DT.Size()
	cs := make([]*copyPair, p.n)
	for j, r := range recvs {
		if r != nil {
			cs[j] = &copyPair{dst: r.Sub(p.me*blk, blk), src: o.Send.Sub(j*blk, blk), off: p.me * blk}
		}
	}
	return p.pushes(s, cs, func() error {
		return s.CopyDtoD(o.Recv.Sub(p.me*blk, blk), o.Send.Sub(p.me*blk, blk))
	})
}

// reduceScatter reduces block Rank() of every rank's send, reading the
// peers' blocks in place: the first shot of allReduce.
func (p *directPlane) reduceScatter(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	sends, err := p.remotes(in, 0)
	if err != nil {
		return err
	}
	sz := o.DT.Size()
	a, b := p.me*o.Count, (p.me+1)*o.Count
	return p.reduceInto(s, o.Recv, sub(o.Send, a, b, sz), shift(sends, a, b, sz), 0, o.Count, o)
}

// shift cuts elements [a, b) out of every non-nil buffer.
func shift(bufs []*gpu.Buffer, a, b, sz int) []*gpu.Buffer {
	out := make([]*gpu.Buffer, len(bufs))
	for j, x := range bufs {
		if x != nil {
			out[j] = sub(x, a, b, sz)
		}
	}
	return out
}

// reduce: the root reduces every rank's send, reading the peers' in place.
func (p *directPlane) reduce(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	if p.me != o.Root {
		return nil
	}
	sends, err := p.remotes(in, 0)
	if err != nil {
		return err
	}
	return p.reduceInto(s, o.Recv, o.Send, sends, 0, o.Count, o)
}

// broadcast: every non-root pulls the root's send into its recv, so the
// copies run on N-1 GPUs' copy engines at once instead of queueing on the
// root's.
func (p *directPlane) broadcast(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	if p.me == o.Root {
		if sameMem(o.Send, o.Recv) {
			return nil
		}
		return s.CopyDtoD(o.Recv, o.Send)
	}
	src, err := p.remote(in, o.Root, 0)
	if err != nil {
		return err
	}
	return s.CopyDtoD(o.Recv, src)
}

// group: receivers pull. The i-th receive from a peer copies from the
// buffer of that peer's i-th send to this rank, described in its ready
// message.
func (p *directPlane) group(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	k := make([]int, p.n)
	for i, e := range o.P2P {
		if e.Send {
			continue
		}
		src, err := p.remote(in, e.Peer, k[e.Peer])
		if err != nil {
			return err
		}
		k[e.Peer]++
		if src.Len() != e.Buf.Len() {
			return fmt.Errorf("group entry %d: receive of %d bytes from rank %d on %s, which sends %d: %w",
				i, e.Buf.Len(), e.Peer, p.c.PeerHost(e.Peer), src.Len(), errs.ErrMismatch)
		}
		if err := s.CopyDtoD(e.Buf, src); err != nil {
			return err
		}
	}
	return nil
}
