package direct

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/fabric/nvlink"
	"github.com/flexlink/flexlink/gpu"
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
// read the peers' blocks (pull mode, moves.go); the allreduce
// normally runs as a flag kernel (flag.go); reductions run in kernels that
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
		p.lanes.stores = o.Kind == plane.AllGather && p.modes.agStore || o.Kind == plane.AllToAll && p.modes.a2aStore
		defer func() { p.lanes.stores = false }()
		switch {
		case o.Kind == plane.AllGather && p.modes.agPull:
			return p.allGatherPull(o, s, in)
		case o.Kind == plane.AllGather:
			return p.allGather(o, s, in)
		case p.modes.a2aPull:
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
	return p.ipc.Open(j, nvlink.GetDesc(in[j][p.readyLen+k*nvlink.DescBytes:]))
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
	return chunkElems(p.chunkMax, blockBytes, sz)
}

func chunkElems(chunkMax, blockBytes, sz int) int {
	cs := min(chunkMax, max(blockBytes/8, chunkMax/4))
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
			if err := s.Record(p.ev.startEv); err != nil {
				return err
			}
		}
		for _, j := range p.rotated() {
			var err error
			if piped {
				err = p.pushSplit(j, 0, a*sz, sub(recvs[j], a, b, sz), dst, p.ev.startEv)
			} else {
				err = p.lanes.onStream(s, sub(recvs[j], a, b, sz), dst)
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

// The push allreduce: only copy engines cross NVLink.
//
// The read allreduce (allReduce) has kernels read the peers' send buffers
// over NVLink. Remote reads cost link bandwidth for requests as well as
// data, and on 2×H200 it tops out near NCCL. Here every byte crosses the
// link as a copy-engine write, the cheapest way over it:
//
//  1. rank i pushes block j of its send into a scratch slot on peer j
//     (group-0 copy lanes), chunk by chunk, recording IPC event pushEv[j][k]
//     after chunk k;
//  2. ranks tell each other "pushed" over the host links: from then on the
//     peer's push events may be waited on (their records are enqueued);
//  3. for each chunk k of its own block, rank i waits for every peer's
//     chunk k, reduces send + the N-1 scratch slots locally (HBM only) into
//     recv, and pushes the result into every peer's recv (group-1 lanes),
//     so the reduction of chunk k+1 overlaps the pushes of chunk k and of
//     the peers' later chunks.
//
// Each direction of a pair then carries (N-1)/N of the vector twice, all
// copy-engine writes.
//
// Scratch is this rank's own memory, (N-1) block-sized slots, exported to
// the peers like a user buffer (descriptor 2 of an allreduce's ready
// message). It is grown on demand and never shrunk; outgrown scratch stays
// allocated until Close, because peers may still have it mapped.
//
// Ordering beyond the common handshake: a peer's previous allreduce may
// still be reading its scratch on the GPU when this rank starts pushing the
// next one. Before sending "ready", this rank makes its group-0 lanes wait
// on the peer's done event toward it, recorded after those reads; that
// event cannot be recorded again before the peer has this rank's next ready
// message, so the wait binds to the right record. The push events follow
// the ready rule: recorded once per call, waited on by the peer before its
// "done" message, which arrives before the next record.

const (
	pushChunks   = 32      // chunks per block, so push IPC events per peer
	pushMinBlock = 4 << 20 // bytes: smaller blocks take the read allreduce (fewer steps, less latency)
	scratchCap   = 2 << 30 // bytes: allreduces that need more scratch take the read allreduce
)

// pushGeom is how a push allreduce cuts its vector.
type pushGeom struct {
	ok  bool
	per int // elements per block (the largest block; all slots this size)
	ce  int // elements per chunk
}

// slotOf is the scratch slot on rank to that rank from holds.
func slotOf(from, to int) int {
	if from < to {
		return from
	}
	return from - 1
}

// prepPush grows the scratch to what o needs and, before this call's ready
// message goes out, makes the group-0 lanes wait until every peer's
// previous allreduce has finished reading its scratch (see above).
func (p *directPlane) prepPush(o *plane.Op, g pushGeom) error {
	if err := p.scratch.push.grow(p.dev, (p.n-1)*g.per*o.DT.Size()); err != nil {
		return err
	}
	for j, l := range p.lanes.peers {
		if l == nil {
			continue
		}
		for i := 0; i < p.lanes.width; i++ {
			if err := l.Stream(i).Wait(p.ev.pDone[j]); err != nil {
				return err
			}
		}
		p.note(traceRec{actor: p.me, owner: j, to: p.me, chunk: -1, call: p.seq.lastDone[j], wait: true})
	}
	return nil
}

// scratchSet is the plane's device scratch: the push allreduce's, and the
// staging of an in-place all-to-all's send (stageInPlace, shared_work.go).
type scratchSet struct {
	push, stage pushScratch
	bytes       atomic.Int64 // device memory both hold (Memory)
	last        *gpu.Event   // recorded after the latest call that used a scratch (on this rank or, pushing, on a peer)
	lastS       *gpu.Stream  // the stream it was recorded on; nil: none since the last quiesce
}

// used records, after a call that used the scratch on s, the event that
// quiesce waits for (Suspend and Close free the scratch after it). A
// failed record is kept in *err when the call has none.
func (ss *scratchSet) used(s *gpu.Stream, err *error) {
	if ss.last == nil {
		ev, e := s.Device().NewEvent(false)
		if e != nil {
			*err = errors.Join(*err, e)
			return
		}
		ss.last = ev
	}
	if e := s.Record(ss.last); e != nil {
		*err = errors.Join(*err, e)
		return
	}
	ss.lastS = s
}

// quiesce waits for the latest call that used the scratch.
func (ss *scratchSet) quiesce() error {
	if ss.lastS == nil {
		return nil
	}
	if err := ss.last.Synchronize(); err != nil {
		return err
	}
	ss.lastS = nil
	return nil
}

func (ss *scratchSet) close() error {
	err := errors.Join(ss.push.close(), ss.stage.close())
	ss.bytes.Store(0)
	return err
}

// closeAll is close and the event too (the plane's Close).
func (ss *scratchSet) closeAll() error {
	err := ss.close()
	if ss.last != nil {
		err = errors.Join(err, ss.last.Close())
		ss.last, ss.lastS = nil, nil
	}
	return err
}

// pushScratch is a scratch buffer (the push allreduce's, or the in-place
// all-to-all staging): grown on demand, never shrunk; outgrown scratch
// stays allocated until close (peers may still have it mapped).
type pushScratch struct {
	buf     *gpu.Buffer   // nil until the first push allreduce
	retired []*gpu.Buffer // outgrown scratch
	held    *atomic.Int64 // the set's byte count (nil: not counted)
}

// grow makes buf at least need bytes: need, or twice the old size up to
// scratchCap, whichever is more.
func (sc *pushScratch) grow(dev *gpu.Device, need int) error {
	if sc.buf != nil && sc.buf.Len() >= need {
		return nil
	}
	size := need
	if sc.buf != nil {
		size = max(need, min(scratchCap, 2*sc.buf.Len()))
		sc.retired = append(sc.retired, sc.buf)
		sc.buf = nil
	}
	b, err := dev.Alloc(size)
	if err != nil {
		return err
	}
	sc.buf = b
	if sc.held != nil {
		sc.held.Add(int64(size))
	}
	return nil
}

func (sc *pushScratch) close() error {
	if sc.buf != nil {
		sc.retired = append(sc.retired, sc.buf)
		sc.buf = nil
	}
	var first error
	for _, b := range sc.retired {
		if err := b.Free(); err != nil && first == nil {
			first = err
		}
	}
	sc.retired = nil
	return first
}

// allReducePush runs steps 1-3 above; s already waits on every peer's
// ready event.
func (p *directPlane) allReducePush(ctx context.Context, o *plane.Op, s *gpu.Stream, in [][]byte, peers []int, call uint64, g pushGeom) error {
	sz := o.DT.Size()
	recvs, err := p.remotes(in, 1)
	if err != nil {
		return err
	}
	scr, err := p.remotes(in, 2)
	if err != nil {
		return err
	}
	if err := s.Record(p.ev.startEv); err != nil {
		return err
	}
	// 1. Push block j to peer j's scratch.
	for _, j := range peers {
		lo, hi := blockRange(o.Count, p.n, j, sz)
		base := slotOf(p.me, j) * g.per
		for k, a := 0, lo; a < hi; k, a = k+1, a+g.ce {
			b := min(hi, a+g.ce)
			var after *gpu.Event
			if k < p.lanes.width {
				after = p.ev.startEv // each lane's first chunk
			}
			st, err := p.lanes.copyOn(j, 0, k, sub(scr[j], base+a-lo, base+b-lo, sz), sub(o.Send, a, b, sz), after)
			if err != nil {
				return err
			}
			if err := p.ev.recordPush(st, j, k, call); err != nil {
				return err
			}
		}
	}
	// 2. Tell the peers their push events are recorded.
	out, inLen := make([][]byte, p.n), make([]int, p.n)
	for _, j := range peers {
		out[j], inLen[j] = binary.LittleEndian.AppendUint64(nil, call), 8
	}
	msgs, err := p.exchange(ctx, phasePushed, o, peers, out, inLen)
	if err != nil {
		return err
	}
	// 3. Reduce this rank's block chunk by chunk and push the results.
	lo, hi := blockRange(o.Count, p.n, p.me, sz)
	for k, a := 0, lo; a < hi; k, a = k+1, a+g.ce {
		b := min(hi, a+g.ce)
		for _, j := range peers {
			if err := p.ev.waitPush(s, j, k, binary.LittleEndian.Uint64(msgs[j])); err != nil {
				return err
			}
		}
		dst, src := sub(o.Recv, a, b, sz), sub(o.Send, a, b, sz)
		for _, j := range peers {
			base := slotOf(j, p.me) * g.per
			if err := s.Reduce(dst, src, sub(p.scratch.push.buf, base+a-lo, base+b-lo, sz), b-a, o.DT, o.Op); err != nil {
				return err
			}
			src = dst
		}
		if err := s.Finish(dst, b-a, o.DT, o.Op, p.n); err != nil {
			return err
		}
		if err := s.Record(p.ev.chunkEv); err != nil {
			return err
		}
		for _, j := range peers {
			if _, err := p.lanes.copyOn(j, 1, k, sub(recvs[j], a, b, sz), dst, p.ev.chunkEv); err != nil {
				return err
			}
		}
	}
	return p.joinCopies(s)
}
