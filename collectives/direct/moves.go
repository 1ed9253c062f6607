package direct

import (
	"encoding/binary"
	"fmt"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// Moves without reduction: allgather and alltoall, pushed (copy engines or
// store kernels, with a PCIe share for large pushes) or pulled (kernels
// reading the peers), broadcast and group.

// copyPair is one push: dst (peer memory, at offset off of the peer's
// recv buffer) = src.
type copyPair struct {
	dst, src *gpu.Buffer
	off      int
}

// toPeers is one push per peer whose recv is known: src(j) (blk bytes)
// into block Rank() of peer j's recv.
func (p *directPlane) toPeers(in [][]byte, blk int, src func(j int) *gpu.Buffer) ([]*copyPair, error) {
	recvs, err := p.remotes(in, 1)
	if err != nil {
		return nil, err
	}
	cs := make([]*copyPair, p.n)
	for j, r := range recvs {
		if r != nil {
			cs[j] = &copyPair{dst: r.Sub(p.me*blk, blk), src: src(j), off: p.me * blk}
		}
	}
	return cs, nil
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
				if err := p.lanes.onStream(s, c.dst, c.src); err != nil {
					return err
				}
			}
		}
		return local()
	}
	if err := s.Record(p.ev.startEv); err != nil {
		return err
	}
	for _, j := range p.rotated() {
		c := cs[j]
		if c == nil {
			continue
		}
		if err := p.pushSplit(j, 0, c.off, c.dst, c.src, p.ev.startEv); err != nil {
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
	blk := o.Count * o.DT.Size()
	cs, err := p.toPeers(in, blk, func(int) *gpu.Buffer { return o.Send })
	if err != nil {
		return err
	}
	mine := o.Recv.Sub(p.me*blk, blk)
	if p.lanes.stores && !sameMem(mine, o.Send) && (p.n-1)*blk >= fanOutMin {
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
	if err := s.Record(p.ev.startEv); err != nil {
		return err
	}
	blk, local, fused := send.Len(), 0, false
	for _, j := range p.rotated() {
		c := cs[j]
		if c == nil {
			continue
		}
		if fused {
			if err := p.pushSplit(j, 0, c.off, c.dst, c.src, p.ev.startEv); err != nil {
				return err
			}
			continue
		}
		nv, err := p.pushSplitWith(j, c.off, c.dst, c.src, p.ev.startEv, func(d, s *gpu.Buffer) error {
			return p.lanes.copy2On(j, d, mine.Sub(0, d.Len()), s, p.ev.startEv)
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
	blk := o.Count * o.DT.Size()
	cs, err := p.toPeers(in, blk, func(j int) *gpu.Buffer { return o.Send.Sub(j*blk, blk) })
	if err != nil {
		return err
	}
	return p.pushes(s, cs, func() error {
		return s.CopyDtoD(o.Recv.Sub(p.me*blk, blk), o.Send.Sub(p.me*blk, blk))
	})
}

// pushSplit enqueues dst = src toward peer j: the head on the copy lanes
// of group g (p.split), the tail, this push's staged parts (shares.go). off is
// dst's offset in the peer's recv buffer (the receiver's H2D target). Both
// parts wait for after.
func (p *directPlane) pushSplit(j, g, off int, dst, src *gpu.Buffer, after *gpu.Event) error {
	_, err := p.pushSplitWith(j, off, dst, src, after, func(d, s *gpu.Buffer) error { return p.lanes.split(j, g, d, s, after) })
	return err
}

// pushSplitWith is pushSplit with the NVLink head enqueued by nvlink; it
// returns the head's length. The call's split (split.go) gives the
// ranges: head | ... | share 1's part | share 0's part.
func (p *directPlane) pushSplitWith(j, off int, dst, src *gpu.Buffer, after *gpu.Event, nvlink func(dst, src *gpu.Buffer) error) (int, error) {
	n := dst.Len()
	part, err := p.split.take(j, off, n)
	if err != nil {
		return 0, err
	}
	h := part.Head()
	if h > 0 {
		if err := nvlink(dst.Sub(0, h), src.Sub(0, h)); err != nil {
			return 0, err
		}
	}
	return h, p.sh.stage(j, off, part, src, after)
}

// joinCopies makes s wait for every lane used since the last join (first
// timing the lanes of pushes whose NVLink part is measured, see
// fabric/pcieshare: Probe).
func (p *directPlane) joinCopies(s *gpu.Stream) error {
	if err := p.sh.probe(); err != nil {
		return err
	}
	return p.lanes.join(s)
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
// peers' recv; see pushes below.)
//
// The PCIe share (fabric/pcieshare) does not apply: a pull pushes nothing, so
// the call's split (split.go) gives them no bytes to split: they move over
// NVLink only.
//
// # Ordering
//
// The per-call protocol of direct.go covers pulls with no extra events:
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

// moveModes is how this rank moves allreduces, allgathers and alltoalls.
type moveModes struct {
	arMode   string // FLEXLINK_GPU_ALLREDUCE
	agPull   bool   // FLEXLINK_GPU_ALLGATHER=pull
	a2aPull  bool   // FLEXLINK_GPU_ALLTOALL=pull
	agStore  bool   // FLEXLINK_GPU_ALLGATHER=store: the pushes' NVLink part as kernel stores
	a2aStore bool   // FLEXLINK_GPU_ALLTOALL=store
}

// readModes resolves cfg's modes for n ranks.
func readModes(cfg Config, n int) (m moveModes, err error) {
	m.arMode = cfg.AllReduce
	if m.agPull, m.agStore, err = moveSetting(cfg.AllGather, "FLEXLINK_GPU_ALLGATHER", n); err != nil {
		return m, err
	}
	m.a2aPull, m.a2aStore, err = moveSetting(cfg.AllToAll, "FLEXLINK_GPU_ALLTOALL", n)
	return m, err
}

// pulls says whether o is an allgather or alltoall that this rank pulls.
func (m *moveModes) pulls(o *plane.Op) bool {
	return o.Kind == plane.AllGather && m.agPull || o.Kind == plane.AllToAll && m.a2aPull
}

// readyFlags are the mode bits of this rank's ready header for o.
func (m *moveModes) readyFlags(o *plane.Op) uint64 {
	if m.pulls(o) {
		return pullFlag
	}
	return 0
}

// checkModes fails when a peer's ready message says it pushes where this
// rank pulls or the other way round.
func (p *directPlane) checkModes(o *plane.Op, in [][]byte) error {
	mine := p.modes.readyFlags(o)
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
	p.stats.add(linkNVLink, dst.Len())
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
	l := p.lanes.first()
	if l == nil || dst.Len() < fanOutMin {
		return s.CopyDtoD(dst, src)
	}
	if err := s.Record(p.ev.startEv); err != nil {
		return err
	}
	k := p.lanes.width // group 1, lane 0
	if err := l.Stream(k).Wait(p.ev.startEv); err != nil {
		return err
	}
	return l.Use(k).CopyDtoD(dst, src)
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

// stageInPlace returns o with its send copied (on s) into the plane's
// staging scratch: an in-place all-to-all (send and recv overlap) on the
// event protocol or the flag kernels, where peers write blocks into recv
// that this rank has not sent yet.
func (p *directPlane) stageInPlace(o *plane.Op, s *gpu.Stream) (*plane.Op, error) {
	if err := p.scratch.stage.grow(p.dev, o.Send.Len()); err != nil {
		return nil, fmt.Errorf("in-place all-to-all staging of %d bytes: %w", o.Send.Len(), err)
	}
	st := p.scratch.stage.buf.Sub(0, o.Send.Len())
	if err := s.Copy(st, o.Send); err != nil {
		return nil, err
	}
	staged := *o
	staged.Send = st
	return &staged, nil
}
