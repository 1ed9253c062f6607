package direct

import (
	"encoding/binary"
	"fmt"

	"flexlink/collectives/plane"
	"flexlink/gpu"
	"flexlink/internal/errs"
)

// The pull allgather and alltoall (FLEXLINK_GPU_ALLGATHER=pull,
// FLEXLINK_GPU_ALLTOALL=pull): each rank copies every peer's block into its
// own recv with a kernel on its own SMs that READS the peer's IPC-mapped
// send buffer, instead of the peers' copy engines writing into it.
//
// Why: on 2×H200 copy-engine pushes into a peer's recv reached only
// ~255–290 GB/s per direction with both ranks pushing, while a reduction
// kernel reading one input from the peer ran at 367 GB/s over the link.
//
// The copy is the SMs' byte copy kernel (gpu.Stream.Copy) with the peer's
// send as its source. (FLEXLINK_GPU_ALLGATHER=store is the other way
// round: the pushes' NVLink part as the same kernel storing into the
// peers' recv; see pushes in gpu_direct_ops.go.)
//
// The PCIe share (gpu_pcie*.go) does not apply: a pull pushes nothing, so
// pushBytes is 0 for these calls and they move over NVLink only.
//
// # Ordering
//
// The per-call protocol of gpu_direct.go covers pulls with no extra events:
//
//   - Peer j's send is complete when I read it: j recorded ready_j on its
//     stream after the work that wrote its send (step 1), and my stream s
//     waits on ready_j (step 3) before the pull kernels are enqueued on it
//     (step 4).
//   - My recv is free when I write it: the pulls write only my own recv,
//     on s (or a lane released by an event recorded on s), after the work
//     the caller enqueued on s earlier. No peer writes my recv in a pull.
//   - Peer j must not overwrite its send until I have finished reading it:
//     I record done_i→j on s after the pull kernels (step 5; the local copy
//     lane is joined into s before it), and j's stream waits on done_i→j
//     (step 7) before j's call returns, so before anything j enqueues later
//     (a kernel writing its send, or its next call) can run. Symmetrically
//     I do not touch my send after this call until every peer's done_j→i,
//     recorded after their reads of it, has fired.
//
// All ranks must agree on the mode (a pushing rank and a pulling rank would
// each leave the other's block unwritten): the ready message carries the
// mode (bit 24 of header word 1), and a call whose ranks disagree fails
// with ErrMismatch on every rank before any data moves.

// pullFlag is the ready-header bit that says this rank's call pulls.
const pullFlag = 1 << 24

// moveSetting parses FLEXLINK_GPU_ALLGATHER or FLEXLINK_GPU_ALLTOALL for
// n ranks: push (copy engines), store (the same pushes as kernel stores),
// pull, or auto: store with two ranks, pull with more (measured on 2xH200
// and 4xH200, docs/PERF.md: with three peers behind NVSwitch the pulls
// reached 322 GB/s per GPU at 1 GiB, the stores 221).
func moveSetting(v, name string, n int) (pull, store bool, err error) {
	switch v {
	case "auto":
		return n > 2, n <= 2, nil
	case "push", "":
		return false, false, nil
	case "store":
		return false, true, nil
	case "pull":
		return true, false, nil
	}
	return false, false, fmt.Errorf("%s=%q: want auto, push, store or pull", name, v)
}

// pulls says whether o is an allgather or alltoall that this rank pulls.
func (p *directPlane) pulls(o *plane.Op) bool {
	return o.Kind == plane.AllGather && p.agPull || o.Kind == plane.AllToAll && p.a2aPull
}

// readyFlags are the mode bits of this rank's ready header for o.
func (p *directPlane) readyFlags(o *plane.Op) uint64 {
	if p.pulls(o) {
		return pullFlag
	}
	return 0
}

// checkModes fails when a peer's ready message says it pushes where this
// rank pulls or the other way round.
func (p *directPlane) checkModes(o *plane.Op, in [][]byte) error {
	mine := p.readyFlags(o)
	for j, m := range in {
		if j == p.me || len(m) < 16 {
			continue
		}
		if theirs := binary.LittleEndian.Uint64(m[8:]) & pullFlag; theirs != mine {
			mode := map[bool]string{false: "push", true: "pull"}
			name := map[plane.Kind]string{plane.AllGather: "FLEXLINK_GPU_ALLGATHER", plane.AllToAll: "FLEXLINK_GPU_ALLTOALL"}[o.Kind]
			return fmt.Errorf("gpu %s: %s=%s here but %s on rank %d (%s): every rank must use the same: %w",
				o.Kind, name, mode[mine != 0], mode[theirs != 0], j, p.c.PeerHost(j), errs.ErrMismatch)
		}
	}
	return nil
}

// pullCopy enqueues dst = src on s with the copy kernel reading the peer.
func (p *directPlane) pullCopy(s *gpu.Stream, dst, src *gpu.Buffer) error {
	p.px.cur[linkNVLink] += int64(dst.Len())
	return s.Copy(dst, src)
}

// sideCopy enqueues this rank's local block copy dst = src: on a copy lane
// (group 1, lane 0 of the first peer; the pulls use no lanes) when large, so
// the copy engine runs it while the SMs pull, else on s. The caller joins
// the lanes into s (joinCopies) after the pulls.
func (p *directPlane) sideCopy(s *gpu.Stream, dst, src *gpu.Buffer) error {
	if sameMem(dst, src) || dst.Len() == 0 {
		return nil
	}
	var l *lanes
	for _, x := range p.lanes {
		if x != nil {
			l = x
			break
		}
	}
	if l == nil || dst.Len() < fanOutMin {
		return s.CopyDtoD(dst, src)
	}
	if err := s.Record(p.startEv); err != nil {
		return err
	}
	k := p.width // group 1, lane 0
	if err := l.streams[k].Wait(p.startEv); err != nil {
		return err
	}
	l.used[k] = true
	return l.streams[k].CopyDtoD(dst, src)
}

// pullBlocks copies, for every peer j, src(j) (in j's send) into block j of
// this rank's recv, and mine into block Rank(), each block blk bytes.
func (p *directPlane) pullBlocks(o *plane.Op, s *gpu.Stream, in [][]byte, blk int, src func(j int, send *gpu.Buffer) *gpu.Buffer) error {
	sends, err := p.remotes(in, 0)
	if err != nil {
		return err
	}
	if blk == 0 {
		return nil
	}
	if err := p.sideCopy(s, o.Recv.Sub(p.me*blk, blk), src(p.me, o.Send)); err != nil {
		return err
	}
	// Start with the next rank, so the N ranks do not all read rank 0 first.
	for i := 1; i < p.n; i++ {
		j := (p.me + i) % p.n
		if err := p.pullCopy(s, o.Recv.Sub(j*blk, blk), src(j, sends[j])); err != nil {
			return err
		}
	}
	return p.joinCopies(s)
}

// allGatherPull: block j of my recv = peer j's send.
func (p *directPlane) allGatherPull(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	return p.pullBlocks(o, s, in, o.Count*o.DT.Size(), func(_ int, send *gpu.Buffer) *gpu.Buffer { return send.Sub(0, o.Count*o.DT.Size()) })
}

// allToAllPull: block j of my recv = block Rank() of peer j's send.
func (p *directPlane) allToAllPull(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	blk := o.Count * o.DT.Size()
	return p.pullBlocks(o, s, in, blk, func(_ int, send *gpu.Buffer) *gpu.Buffer { return send.Sub(p.me*blk, blk) })
}
