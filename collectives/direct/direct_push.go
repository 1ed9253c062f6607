package direct

import (
	"context"
	"encoding/binary"

	"flexlink/collectives/plane"
	"flexlink/gpu"
)

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

// pushPlan decides, identically on every rank, whether o uses the push
// allreduce and with what geometry.
func (p *directPlane) pushPlan(o *plane.Op) pushGeom {
	if p.n < 2 || p.arMode == "read" {
		return pushGeom{}
	}
	sz := o.DT.Size()
	lo, hi := blockRange(o.Count, p.n, 0, sz)
	per := hi - lo
	blockBytes := per * sz
	if blockBytes == 0 || (p.n-1)*blockBytes > scratchCap || p.arMode == "auto" && blockBytes < pushMinBlock {
		return pushGeom{}
	}
	ce := p.chunkElems(blockBytes, sz)
	if (per+ce-1)/ce > pushChunks {
		g := max(1, blockAlign/sz)
		ce = ((per+pushChunks-1)/pushChunks + g - 1) / g * g
	}
	return pushGeom{ok: true, per: per, ce: ce}
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
func (p *directPlane) prepPush(o *plane.Op) error {
	g := p.pushPlan(o)
	need := (p.n - 1) * g.per * o.DT.Size()
	if p.scratch == nil || p.scratch.Len() < need {
		size := need
		if p.scratch != nil {
			size = max(need, min(scratchCap, 2*p.scratch.Len()))
			p.retired = append(p.retired, p.scratch)
			p.scratch = nil
		}
		b, err := p.dev.Alloc(size)
		if err != nil {
			return err
		}
		p.scratch = b
	}
	for j, l := range p.lanes {
		if l == nil {
			continue
		}
		for i := 0; i < p.width; i++ {
			if err := l.streams[i].Wait(p.pDone[j]); err != nil {
				return err
			}
		}
		p.note(traceRec{actor: p.me, owner: j, to: p.me, chunk: -1, call: p.lastDone[j], wait: true})
	}
	return nil
}

// allReducePush runs steps 1-3 above; s already waits on every peer's
// ready event.
func (p *directPlane) allReducePush(ctx context.Context, o *plane.Op, s *gpu.Stream, in [][]byte, peers []int, call uint64) error {
	g := p.pushPlan(o)
	sz := o.DT.Size()
	recvs, err := p.remotes(in, 1)
	if err != nil {
		return err
	}
	scr, err := p.remotes(in, 2)
	if err != nil {
		return err
	}
	if err := s.Record(p.startEv); err != nil {
		return err
	}
	// 1. Push block j to peer j's scratch.
	for _, j := range peers {
		lo, hi := blockRange(o.Count, p.n, j, sz)
		base := slotOf(p.me, j) * g.per
		for k, a := 0, lo; a < hi; k, a = k+1, a+g.ce {
			b := min(hi, a+g.ce)
			var after *gpu.Event
			if k < p.width {
				after = p.startEv // each lane's first chunk
			}
			st, err := p.copyOn(j, 0, k, sub(scr[j], base+a-lo, base+b-lo, sz), sub(o.Send, a, b, sz), after)
			if err != nil {
				return err
			}
			p.note(traceRec{actor: p.me, owner: p.me, to: j, chunk: k, call: call})
			if err := st.Record(p.pushEv[j][k]); err != nil {
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
			if err := s.Wait(p.pPush[j][k]); err != nil {
				return err
			}
			p.note(traceRec{actor: p.me, owner: j, to: p.me, chunk: k, call: binary.LittleEndian.Uint64(msgs[j]), wait: true})
		}
		dst, src := sub(o.Recv, a, b, sz), sub(o.Send, a, b, sz)
		for _, j := range peers {
			base := slotOf(j, p.me) * g.per
			if err := s.Reduce(dst, src, sub(p.scratch, base+a-lo, base+b-lo, sz), b-a, o.DT, o.Op); err != nil {
				return err
			}
			src = dst
		}
		if err := s.Finish(dst, b-a, o.DT, o.Op, p.n); err != nil {
			return err
		}
		if err := s.Record(p.chunkEv); err != nil {
			return err
		}
		for _, j := range peers {
			if _, err := p.copyOn(j, 1, k, sub(recvs[j], a, b, sz), dst, p.chunkEv); err != nil {
				return err
			}
		}
	}
	return p.joinCopies(s)
}
