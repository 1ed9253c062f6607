package direct

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/flagplane"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/nvlink"
	"github.com/flexlink/flexlink/fabric/shares"
	"github.com/flexlink/flexlink/gpu"
)

// The direct plane: ranks of one host whose GPUs reach each other read and
// write each other's user buffers (CUDA IPC mappings) with copy engines and
// reduction kernels. What follows is the per-call protocol; the data
// movement of each collective is in ops.go (reductions) and moves.go
// (allgather, alltoall, broadcast, group).
//
// # Who owns what
//
// directPlane runs the protocol and the algorithms; each part it drives
// owns its state:
//
//   - peers: the host links, the device, the rank and size, the trace hook
//     (shared, read-only after setup, by every part below);
//   - eventSet (events.go): the protocol's IPC events;
//   - nvlink.Window (fabric/nvlink): the peers' buffers, mapped;
//   - laneSet (lanes.go): the copy lanes and how a push uses them;
//   - callPlan (split.go): the call's split over the links, computed once;
//   - shareList (shares.go): the staged link shares of large pushes
//     (fabric/linkshare: the PCIe share and the net share riding with it,
//     as fabric/shares lists them), driven without knowing which;
//   - flagplane.Plane (collectives/flagplane): the flag kernels, which
//     bypass this protocol;
//   - linkStats (stats.go): the bytes per link for LinkShares;
//   - callSeq, moveModes, pushScratch: call numbers, the allgather and
//     alltoall modes, the push allreduce's scratch.
//
// # Ordering across processes
//
// Every call runs this on rank i with the caller's stream s:
//
//  1. s records ready_i (an IPC event): "the work enqueued on s before this
//     call is done" (the send buffer is written, the recv buffer is free).
//  2. i sends each peer a "ready" message (its call number and descriptors
//     of its buffers) and receives theirs over the host links.
//  3. s waits on every peer's ready_j (their opened IPC events): the work
//     below touches peer memory only once the peer's earlier work is done.
//  4. the work is enqueued on s (and on i's copy streams, joined back to s;
//     the staged shares of large pushes are staged D2H, see fabric/pcieshare).
//  5. s records done_i→j for every peer j: "i has finished reading j's
//     buffers and writing into them" (apart from the staged PCIe part).
//  6. i sends each peer a "done" message (with the staging table, if any)
//     and receives theirs.
//  7. s waits on every peer's done_j→i: work the caller enqueues on s later
//     runs only after the peers have finished with this rank's buffers;
//     then on the H2D copies of the peers' staged parts into them.
//
// The host blocks only in 2 and 6 (a few microseconds over shm links, every
// wait bounded by ctx); the data moves asynchronously.
//
// # When an IPC event may be recorded again
//
// cuStreamWaitEvent waits for the most recent record of an event at the
// time the wait is enqueued. If an owner re-recorded an event before a peer
// had enqueued its wait for the previous record, the peer would wait for
// the wrong (later) record, which may depend on the peer itself: a deadlock.
// So an event is recorded again only after every peer that waits on it has
// enqueued that wait, and the host messages prove it:
//
//   - ready_i is recorded once per call. Peer j waits on it in step 3 and
//     only then sends its "done" message (step 6), which i receives before
//     its call returns, so before i records ready_i again in its next call.
//   - done_i→j is recorded only in calls that involve j. j waits on it in
//     step 7 of the same call, before j's call returns; j's next call with
//     i starts with its "ready" message, which i receives (step 2) before it
//     records done_i→j again (step 5). One done event per peer (not one per
//     rank) is what makes this hold for Group calls, which involve only
//     some peers: a rank never re-records an event toward a peer it has not
//     heard from since.
//
// The test TestGPUEventRecordOrder checks this on the fake driver from a log
// of every record and wait.
type directPlane struct {
	*peers
	ipc      *nvlink.Window   // peers' buffers mapped here, this rank's exported
	ev       *eventSet        // the protocol's IPC events
	lanes    *laneSet         // copy lanes toward each peer
	sh       shareList        // the staged link shares of large pushes (shares.go)
	set      *shares.Set      // their list as fabric/shares made it, with the PCIe settings the flag kernels read
	flag     *flagplane.Plane // the flag kernels (collectives/flagplane); nil when off
	readyLen int              // a ready message's header: readyAt, then the shares' words
	stats    *linkStats       // bytes per link, for LinkShares
	seq      callSeq
	modes    moveModes    // FLEXLINK_GPU_ALLREDUCE, _ALLGATHER, _ALLTOALL (moves.go)
	scratch  scratchSet   // the push allreduce's scratch, the in-place all-to-all staging (ops.go)
	chunkMax int          // FLEXLINK_GPU_CHUNK_BYTES
	split    *callPlan    // the running call's split (split.go): the pushes read it
	shared   *sharedState // every rank on one GPU: the leader path (shared.go); nil otherwise
}

// peers is what every part of the plane shares: the host side of the
// communicator, this rank's device, the ranks, and the trace hook. It is
// set up once; the parts hold the same pointer.
type peers struct {
	c     plane.Host
	dev   *gpu.Device
	n, me int

	// trace, when set (tests), sees every record and wait of an IPC event.
	trace func(traceRec)
}

// callSeq numbers the handshake calls.
type callSeq struct {
	calls    uint64   // calls so far (sent in messages, for the trace)
	pairSeq  []uint64 // calls so far with each peer (in the tags)
	lastDone []uint64 // each peer's call number in its last done message (trace)
}

func newDirectPlane(c plane.Host, dev *gpu.Device, cfg Config) (p *directPlane, err error) {
	n := c.Size()
	modes, err := readModes(cfg, n)
	if err != nil {
		return nil, err
	}
	pr := &peers{c: c, dev: dev, n: n, me: c.Rank()}
	stats := &linkStats{n: 1, kinds: [1 + maxShares]string{string(fabric.KindNVLink)}}
	p = &directPlane{peers: pr, chunkMax: cfg.ChunkBytes, modes: modes, stats: stats,
		ipc: nvlink.NewWindow(dev, n, c.PeerHost),
		seq: callSeq{pairSeq: make([]uint64, n), lastDone: make([]uint64, n)}}
	p.scratch.push.held, p.scratch.stage.held = &p.scratch.bytes, &p.scratch.bytes
	made := p // p is nil in the deferred call after "return nil, err"
	defer func() {
		if err != nil {
			made.close()
		}
	}()
	if p.set, err = newShares(pr, cfg.Shares, cfg.CopyStreams, func() *laneSet { return p.lanes }, stats); err != nil {
		return nil, err
	}
	if p.sh = p.set.List; len(p.sh) > maxShares {
		return nil, fmt.Errorf("gpu links: %d staged shares, at most %d (fabric/shares)", len(p.sh), maxShares)
	}
	p.readyLen = readyAt + p.sh.words()
	for k, sh := range p.sh {
		stats.kinds[1+k] = string(sh.Kind())
	}
	stats.n = 1 + len(p.sh)
	if p.ev, err = newEventSet(pr); err != nil {
		return nil, err
	}
	if p.lanes, err = newLaneSet(pr, cfg.CopyStreams, stats); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *directPlane) close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if p.lanes != nil {
		keep(p.lanes.close())
	}
	keep(p.sh.close())
	if p.flag != nil {
		keep(p.flag.Close())
		p.flag = nil
	}
	keep(p.ipc.Close())
	keep(p.scratch.closeAll())
	keep(p.shared.close())
	if p.ev != nil {
		keep(p.ev.close())
	}
	return first
}

// do runs one call: handshake, work, handshake (see the type's comment).
func (p *directPlane) do(ctx context.Context, o *plane.Op, s *gpu.Stream) (err error) {
	if err := p.flag.Err(); err != nil {
		return err
	}
	if o.Self.Dst != nil && o.Capture == 0 && !p.flag.P2P(o) {
		// The copy to itself goes first where no flag kernel makes it
		// (CaptureBlocker let only flag groups be captured).
		if err := s.CopyLocal(o.Self.Dst, o.Self.Src); err != nil {
			return fmt.Errorf("gpu group: copy to itself: %w", err)
		}
		o.Self = gpu.SideCopy{}
	}
	if o.Capture != 0 {
		return p.captured(ctx, o, s) // CaptureBlocker took it (capture.go)
	}
	if p.n == 1 && o.Kind != plane.Group && o.Kind != plane.AllToAllv {
		return selfCopy(o, s) // one rank: no peer to meet, no event to record (a copy, or nothing in place)
	}
	if p.shared != nil && o.Kind != plane.Group { // Group keeps the event protocol
		return p.shared.do(ctx, o, s)
	}
	if o.Kind == plane.AllToAll && overlaps(o.Send, o.Recv) {
		defer p.scratch.used(s, &err)
		if o, err = p.stageInPlace(o, s); err != nil {
			return err
		}
	}
	if p.flag.Takes(o) || p.flag.P2P(o) {
		return p.flag.Call(ctx, o, s)
	}
	peers := p.peersOf(o)
	p.seq.calls++
	call := p.seq.calls
	cp := p.planSplit(o, peers) // the call's split, once (split.go)
	push := cp.Push.ok
	if push {
		defer p.scratch.used(s, &err) // the peers' pushes into this rank's scratch, and this rank's into theirs, run on s (lanes joined)
		if err := p.prepPush(o, cp.Push); err != nil {
			return err
		}
	}
	p.stats.begin()
	p.sh.begin(peers, call, cp)
	// Records are noted before they happen and waits after, so the trace
	// test sees every overlap the protocol might allow.
	if err := p.ev.recordReady(s, call); err != nil {
		return err
	}
	out, inLen, err := p.readyMessages(o, peers, call, push)
	if err != nil {
		return err
	}
	in, err := p.exchange(ctx, phaseReady, o, peers, out, inLen)
	if err != nil {
		return err
	}
	for _, j := range peers {
		if err := p.ev.waitReady(s, j, binary.LittleEndian.Uint64(in[j])); err != nil {
			return err
		}
	}
	if err := p.sh.ready(s, in, peers); err != nil {
		return err
	}
	if push {
		err = p.allReducePush(ctx, o, s, in, peers, call, cp.Push)
	} else {
		err = p.work(o, s, in)
	}
	for _, sh := range p.sh {
		if err == nil {
			err = sh.Complete(s)
		}
	}
	for _, sh := range p.sh {
		if err == nil {
			err = sh.Send(ctx, s, o.Recv, peers) // a share's wire (the net share's)
		}
	}
	if err != nil {
		return err
	}
	for _, j := range peers {
		if err := p.ev.recordDone(s, j, call); err != nil {
			return err
		}
		out[j], inLen[j] = p.sh.doneMessage(j, call, out[j][:0])
	}
	if in, err = p.exchange(ctx, phaseDone, o, peers, out, inLen); err != nil {
		return err
	}
	for _, j := range peers {
		theirs := binary.LittleEndian.Uint64(in[j])
		if err := p.ev.waitDone(s, j, theirs); err != nil {
			return err
		}
		p.seq.lastDone[j] = theirs
		p.seq.pairSeq[j]++
	}
	if err := p.sh.receive(s, o.Recv, in, peers); err != nil {
		return err
	}
	p.stats.end()
	return nil
}

// planSplit computes o's split (split.go) once for the call, after the
// shares' finished probes are fed back, and keeps it for the pushes.
func (p *directPlane) planSplit(o *plane.Op, peers []int) *callPlan {
	in := splitIn{Kind: o.Kind, Count: o.Count, Size: o.DT.Size(), N: p.n, Me: p.me, Pull: p.modes.pulls(o),
		ARMode: p.modes.arMode, ChunkMax: p.chunkMax}
	p.sh.splitIn(&in, peers, p.n)
	cp := planCall(in, func(k, j, b int) float64 { return p.sh[k].Fraction(j, b) })
	p.split = &cp
	return p.split
}

// rotated lists the peers from the next rank on: Rank()+1, Rank()+2, ...
// modulo N. Work that visits the peers one after another does so in this
// order, so that at every step the ranks' targets form a permutation: on a
// switch (NVSwitch) no GPU serves three readers or writers while another
// idles, as happened with every rank starting at rank 0 (measured on
// 4xH200: reduce-scatter reading at 167 GB/s per GPU, docs/PERF.md).
func (p *peers) rotated() []int {
	peers := make([]int, 0, p.n-1)
	for i := 1; i < p.n; i++ {
		peers = append(peers, (p.me+i)%p.n)
	}
	return peers
}

func (p *peers) note(r traceRec) {
	if p.trace != nil {
		p.trace(r)
	}
}

// peersOf lists the peers a call involves: all of them for a collective
// (in rotated order, next rank first: see rotated), the ones named for a
// Group.
func (p *directPlane) peersOf(o *plane.Op) []int {
	var peers []int
	if o.Kind != plane.Group {
		return p.rotated()
	}
	seen := make([]bool, p.n)
	for _, e := range o.P2P {
		if !seen[e.Peer] {
			seen[e.Peer] = true
			peers = append(peers, e.Peer)
		}
	}
	return peers
}

// Do runs one call (plane.Plane).
func (p *directPlane) Do(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	return p.do(ctx, o, s)
}

// RunsAllToAllv reports whether AllToAllv runs as one call (plane.VPlane):
// on the leader path it does.
func (p *directPlane) RunsAllToAllv() bool { return p.shared != nil }

// Quiesce waits for this rank's flag kernels, which the peers' kernels write
// into, to end, and for the last call that used the scratch (plane.Plane).
func (p *directPlane) Quiesce() error { return errors.Join(p.flag.Quiesce(), p.scratch.quiesce()) }

// Close releases everything (plane.Plane); without a clean close the flag
// regions stay allocated, since a peer's kernel may still write into them.
func (p *directPlane) Close(clean bool) error {
	if !clean {
		p.flag.Leak()
	}
	return p.close()
}

// AsyncError is the flag kernels' error word, decoded (plane.Plane).
func (p *directPlane) AsyncError() error { return p.flag.Err() }

// LinkShares is the bytes' split over NVLink and the staged shares
// (plane.Plane).
func (p *directPlane) LinkShares() map[string]float64 { return p.stats.shares() }

// The host messages of the direct plane: "ready" and "done" per call (see
// above for what they prove), "pushed" in the push allreduce.
//
// A ready message is readyLen bytes, then one descriptor per buffer the
// peer may touch. Header words: call number, kind/dtype/op (bit 24: this
// rank pulls, moves.go), count, root, then each staged share's words
// (linkshare.Share's Words, ReadyWords), in the list's order: the PCIe
// share's (whether this rank's done message to the peer carries a staging
// table, the timed push, the report on the peer's last one), then the net
// share's (whether a net part follows, its report). A done message is the
// call number, then each share's part (DoneLen: the PCIe share's staging
// table when it announced one).

// Message phases, in the first tag word.
const (
	gpuTagMagic = uint64(0x676e766c_00000000) // "gnvl"
	phaseReady  = 1
	phaseDone   = 2
	phasePushed = 3
	readyAt     = 4 * 8 // the shares' words start here
)

// readyMessages builds the "ready" message for each peer and the length of
// the one expected from it: the header, then descriptors of the buffers the
// peer may touch (send and recv for a collective; for a Group, this rank's
// sends to that peer, which the peer pulls).
func (p *directPlane) readyMessages(o *plane.Op, peers []int, call uint64, push bool) (out [][]byte, inLen []int, err error) {
	out, inLen = make([][]byte, p.n), make([]int, p.n)
	hdr := make([]byte, p.readyLen)
	le := binary.LittleEndian
	le.PutUint64(hdr[0:], call)
	le.PutUint64(hdr[8:], uint64(o.Kind)|uint64(o.DT)<<8|uint64(o.Op)<<16|p.modes.readyFlags(o))
	le.PutUint64(hdr[16:], uint64(o.Count))
	le.PutUint64(hdr[24:], uint64(o.Root))
	bufs := make([][]*gpu.Buffer, p.n)
	want := make([]int, p.n)
	if o.Kind == plane.Group {
		for _, e := range o.P2P {
			if e.Send {
				bufs[e.Peer] = append(bufs[e.Peer], e.Buf)
			} else {
				want[e.Peer]++
			}
		}
	} else {
		// An allreduce also describes the scratch its peers push into (nil
		// unless this call uses the push allreduce).
		mine := []*gpu.Buffer{o.Send, o.Recv}
		if o.Kind == plane.AllReduce {
			var scr *gpu.Buffer
			if push {
				scr = p.scratch.push.buf
			}
			mine = append(mine, scr)
		}
		for _, j := range peers {
			bufs[j], want[j] = mine, len(mine)
		}
	}
	for _, j := range peers {
		m := make([]byte, p.readyLen+len(bufs[j])*nvlink.DescBytes)
		copy(m, hdr)
		p.sh.readyWords(j, m[readyAt:p.readyLen])
		for k, b := range bufs[j] {
			d, err := p.ipc.Describe(b)
			if err != nil {
				return nil, nil, err
			}
			d.Put(m[p.readyLen+k*nvlink.DescBytes:])
		}
		out[j], inLen[j] = m, p.readyLen+want[j]*nvlink.DescBytes
	}
	return out, inLen, nil
}

// exchange sends out[j] to and receives a message of inLen[j] bytes from
// every peer, over the Comm's host links. The tag carries the phase, the
// pair's call count and the call's signature, so ranks that disagree about
// which collective this is fail with ErrMismatch instead of mixing data.
func (p *directPlane) exchange(ctx context.Context, phase uint64, o *plane.Op, with []int, out [][]byte, inLen []int) ([][]byte, error) {
	sig := uint64(o.Kind)
	if o.Kind != plane.Group {
		sig |= uint64(o.DT)<<8 | uint64(o.Op)<<16 | uint64(o.Root)<<24 | uint64(o.Count)<<32
	}
	in := make([][]byte, p.n)
	reqs := make([]fabric.Request, 0, 2*len(with))
	lp := p.c.Peers()
	for _, j := range with {
		tag := fabric.Tag{gpuTagMagic | phase, p.c.ID(), p.seq.pairSeq[j], sig}
		in[j] = make([]byte, inLen[j])
		reqs = append(reqs, lp.Recv(j, tag, collectives.HostBuffer(in[j])))
	}
	for _, j := range with {
		tag := fabric.Tag{gpuTagMagic | phase, p.c.ID(), p.seq.pairSeq[j], sig}
		reqs = append(reqs, lp.Send(j, tag, collectives.HostBuffer(out[j])))
	}
	if err := fabric.WaitAll(ctx, reqs...); err != nil {
		what := map[uint64]string{phaseReady: "ready", phaseDone: "done", phasePushed: "pushed"}[phase]
		return nil, fmt.Errorf("gpu %s: %s handshake with ranks %v: %w", o.Kind, what, with, err)
	}
	return in, nil
}

// Memory is what a rank's direct plane holds on its GPU (device memory
// from cuMemAlloc; IPC mappings of the peers' memory, streams and events
// are not counted).
type Memory struct {
	Bytes   int64    // device memory held now
	Regions []string // the flag regions, one phrase each: size and slots, "lazy", or none
	Scratch int64    // of Bytes: the push allreduce's scratch and the in-place all-to-all staging
}

// String is Memory in one line, for logs.
func (m Memory) String() string {
	return fmt.Sprintf("gpu memory %s: flag regions %s; scratch %s", flagplane.MiB(m.Bytes), strings.Join(m.Regions, ", "), flagplane.MiB(m.Scratch))
}

// Memory reports what the plane holds on the GPU now. Safe to call from
// any goroutine.
func (p *directPlane) Memory() Memory {
	held, regions := p.flag.Memory()
	scratch := p.scratch.bytes.Load()
	return Memory{Bytes: held + scratch, Regions: regions, Scratch: scratch}
}

// Release gives back the plane's device memory (NCCL's ncclCommSuspend):
// the flag regions, the scratch, and the mappings of the peers' buffers.
// The caller has quiesced (no flag kernel of this rank runs) and passed a
// barrier with every rank (no peer's kernel writes here any more), under
// the communicator's queue. The next call makes what it needs again: the
// flag regions with every rank at its first flag call (collectives/flagplane), the
// mappings as buffers are described.
func (p *directPlane) Release() error {
	err := p.flag.Release()
	return errors.Join(err, p.scratch.close(), p.ipc.Close())
}
