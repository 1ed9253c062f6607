package direct

import (
	"context"
	"encoding/binary"
	"fmt"

	"flexlink/collectives/plane"
	"flexlink/gpu"
)

// The direct plane: ranks of one host whose GPUs reach each other read and
// write each other's user buffers (CUDA IPC mappings) with copy engines and
// reduction kernels. What follows is the per-call protocol; the data
// movement of each collective is in gpu_direct_ops.go.
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
//     the PCIe share of large pushes is staged D2H, see gpu_pcie.go).
//  5. s records done_i→j for every peer j: "i has finished reading j's
//     buffers and writing into them" (apart from the staged PCIe part).
//  6. i sends each peer a "done" message (with the staging table, if any)
//     and receives theirs.
//  7. s waits on every peer's done_j→i: work the caller enqueues on s later
//     runs only after the peers have finished with this rank's buffers;
//     then on the H2D copies of the peers' PCIe parts into them.
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
	c        plane.Host
	cfg      Config
	dev      *gpu.Device
	n, me    int
	ipc      *ipcCache
	ready    *gpu.Event     // mine
	done     []*gpu.Event   // done[j]: mine toward peer j
	pReady   []*gpu.Event   // pReady[j]: peer j's ready, opened here
	pDone    []*gpu.Event   // pDone[j]: peer j's done toward me, opened here
	lanes    []*lanes       // copy streams toward each peer (nil for me)
	width    int            // lanes per group (FLEXLINK_GPU_COPY_STREAMS)
	startEv  *gpu.Event     // recorded on s to release the copy lanes
	chunkEv  *gpu.Event     // recorded on s after each reduced chunk
	pushEv   [][]*gpu.Event // pushEv[j][k]: mine, "chunk k of my push to j has landed"
	pPush    [][]*gpu.Event // pPush[j][k]: peer j's pushEv toward me, opened here
	scratch  *gpu.Buffer    // where peers push for the push allreduce (grown on demand)
	retired  []*gpu.Buffer  // outgrown scratch, freed at close (peers may still map it)
	arMode   string         // FLEXLINK_GPU_ALLREDUCE
	agPull   bool           // FLEXLINK_GPU_ALLGATHER=pull (gpu_direct_pull.go)
	a2aPull  bool           // FLEXLINK_GPU_ALLTOALL=pull
	agStore  bool           // FLEXLINK_GPU_ALLGATHER=store: the pushes' NVLink part as kernel stores
	a2aStore bool           // FLEXLINK_GPU_ALLTOALL=store
	stores   bool           // this call's lane copies are kernels (copyOn)
	calls    uint64         // calls so far (sent in messages, for the trace)
	pairSeq  []uint64       // calls so far with each peer (in the tags)
	lastDone []uint64       // each peer's call number in its last done message (trace)
	chunkMax int
	px       pcieState  // the PCIe share of large pushes (gpu_pcie*.go)
	flag     *flagPlane // the flag allreduce (gpu_flag.go); nil when off

	// trace, when set (tests), sees every record and wait of an IPC event.
	trace func(traceRec)
}

// traceRec is one record or wait of an IPC event: by rank actor, on the
// event owned by owner (toward peer to: a done event; -1: the ready event),
// for owner's call number call.
type traceRec struct {
	actor, owner, to int
	chunk            int // push events: the chunk; pcie slot k: -2-k; -1 otherwise
	call             uint64
	wait             bool
}

func newDirectPlane(c plane.Host, dev *gpu.Device, cfg Config) (p *directPlane, err error) {
	n := c.Size()
	chunk, width, mode := cfg.ChunkBytes, cfg.CopyStreams, cfg.AllReduce
	agPull, agStore, err := moveSetting(cfg.AllGather, "FLEXLINK_GPU_ALLGATHER", n)
	if err != nil {
		return nil, err
	}
	a2aPull, a2aStore, err := moveSetting(cfg.AllToAll, "FLEXLINK_GPU_ALLTOALL", n)
	if err != nil {
		return nil, err
	}
	p = &directPlane{c: c, cfg: cfg, dev: dev, n: n, me: c.Rank(), chunkMax: chunk, width: width, arMode: mode,
		agPull: agPull, a2aPull: a2aPull, agStore: agStore, a2aStore: a2aStore,
		ipc:  newIPCCache(dev, n, c.PeerHost),
		done: make([]*gpu.Event, n), pReady: make([]*gpu.Event, n), pDone: make([]*gpu.Event, n),
		lanes: make([]*lanes, n), pushEv: make([][]*gpu.Event, n), pPush: make([][]*gpu.Event, n),
		pairSeq: make([]uint64, n), lastDone: make([]uint64, n)}
	made := p // p is nil in the deferred call after "return nil, err"
	defer func() {
		if err != nil {
			made.close()
		}
	}()
	if err = p.px.settings(cfg.PCIe); err != nil {
		return nil, err
	}
	if p.ready, err = dev.NewIPCEvent(); err != nil {
		return nil, err
	}
	if p.startEv, err = dev.NewEvent(false); err != nil {
		return nil, err
	}
	if p.chunkEv, err = dev.NewEvent(false); err != nil {
		return nil, err
	}
	for j := 0; j < n; j++ {
		if j == p.me {
			continue
		}
		if p.done[j], err = dev.NewIPCEvent(); err != nil {
			return nil, err
		}
		if p.lanes[j], err = newLanes(dev, width); err != nil {
			return nil, err
		}
		p.pushEv[j] = make([]*gpu.Event, pushChunks)
		for k := range p.pushEv[j] {
			if p.pushEv[j][k], err = dev.NewIPCEvent(); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// eventBlobBytes is the size of one rank's event handles in the setup
// exchange: ready, then done toward each rank, then the push events toward
// each rank (zeros where the rank is itself).
func eventBlobBytes(n int) int { return (1 + n + n*pushChunks) * gpu.IPCHandleSize }

func (p *directPlane) putEventHandles(b []byte) error {
	hs := gpu.IPCHandleSize
	put := func(slot int, e *gpu.Event) error {
		h, err := e.IPCHandle()
		copy(b[slot*hs:], h)
		return err
	}
	if err := put(0, p.ready); err != nil {
		return err
	}
	for j := 0; j < p.n; j++ {
		if j == p.me {
			continue
		}
		if err := put(1+j, p.done[j]); err != nil {
			return err
		}
		for k, e := range p.pushEv[j] {
			if err := put(1+p.n+j*pushChunks+k, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// openPeerEvents opens, for every peer, its ready event and its done and
// push events toward this rank, from the setup exchange (stride bytes per
// rank: a verdict byte, then the handles).
func (p *directPlane) openPeerEvents(all []byte, stride int) error {
	hs := gpu.IPCHandleSize
	for j := 0; j < p.n; j++ {
		if j == p.me {
			continue
		}
		b := all[j*stride+1 : (j+1)*stride]
		open := func(slot int, what string) (*gpu.Event, error) {
			e, err := p.dev.OpenIPCEvent(b[slot*hs : (slot+1)*hs])
			if err != nil {
				return nil, fmt.Errorf("open rank %d's %s event (on %s): %w", j, what, p.c.PeerHost(j), err)
			}
			return e, nil
		}
		var err error
		if p.pReady[j], err = open(0, "ready"); err != nil {
			return err
		}
		if p.pDone[j], err = open(1+p.me, "done"); err != nil {
			return err
		}
		p.pPush[j] = make([]*gpu.Event, pushChunks)
		for k := range p.pPush[j] {
			if p.pPush[j][k], err = open(1+p.n+p.me*pushChunks+k, "push"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *directPlane) close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, l := range p.lanes {
		if l != nil {
			keep(l.close())
		}
	}
	keep(p.closePCIe())
	if p.flag != nil {
		keep(p.flag.close())
		p.flag = nil
	}
	keep(p.ipc.close())
	if p.scratch != nil {
		p.retired = append(p.retired, p.scratch)
		p.scratch = nil
	}
	for _, b := range p.retired {
		keep(b.Free())
	}
	p.retired = nil
	sets := [][]*gpu.Event{{p.ready, p.startEv, p.chunkEv}, p.done, p.pReady, p.pDone}
	sets = append(append(sets, p.pushEv...), p.pPush...)
	for _, set := range sets {
		for _, e := range set {
			if e != nil {
				keep(e.Close())
			}
		}
	}
	return first
}

// do runs one call: handshake, work, handshake (see the type's comment).
func (p *directPlane) do(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	if err := p.flagError(); err != nil {
		return err
	}
	if p.flag.takes(o) || p.flagP2P(o) {
		return p.flagCall(o, s)
	}
	peers := p.peersOf(o)
	p.calls++
	call := p.calls
	push := o.Kind == plane.AllReduce && p.pushPlan(o).ok
	if push {
		if err := p.prepPush(o); err != nil {
			return err
		}
	}
	if err := p.pcieBegin(o, peers); err != nil {
		return err
	}
	// Records are noted before they happen and waits after, so the trace
	// test sees every overlap the protocol might allow.
	p.note(traceRec{actor: p.me, owner: p.me, to: -1, chunk: -1, call: call})
	if err := s.Record(p.ready); err != nil {
		return err
	}
	out, inLen, err := p.readyMessages(o, peers, call)
	if err != nil {
		return err
	}
	in, err := p.exchange(ctx, phaseReady, o, peers, out, inLen)
	if err != nil {
		return err
	}
	for _, j := range peers {
		if err := s.Wait(p.pReady[j]); err != nil {
			return err
		}
		p.note(traceRec{actor: p.me, owner: j, to: -1, chunk: -1, call: binary.LittleEndian.Uint64(in[j]), wait: true})
	}
	if err := p.pcieReady(s, in, peers); err != nil {
		return err
	}
	if push {
		err = p.allReducePush(ctx, o, s, in, peers, call)
	} else {
		err = p.work(o, s, in)
	}
	if err == nil {
		err = p.pcieFinish(s)
	}
	if err != nil {
		return err
	}
	for _, j := range peers {
		p.note(traceRec{actor: p.me, owner: p.me, to: j, chunk: -1, call: call})
		if err := s.Record(p.done[j]); err != nil {
			return err
		}
		out[j], inLen[j] = p.doneMessage(j, call, out[j][:0]), p.doneLen(j)
	}
	if in, err = p.exchange(ctx, phaseDone, o, peers, out, inLen); err != nil {
		return err
	}
	for _, j := range peers {
		if err := s.Wait(p.pDone[j]); err != nil {
			return err
		}
		p.lastDone[j] = binary.LittleEndian.Uint64(in[j])
		p.note(traceRec{actor: p.me, owner: j, to: p.me, chunk: -1, call: p.lastDone[j], wait: true})
		p.pairSeq[j]++
	}
	return p.pcieReceive(s, o, in, peers)
}

// rotated lists the peers from the next rank on: Rank()+1, Rank()+2, ...
// modulo N. Work that visits the peers one after another does so in this
// order, so that at every step the ranks' targets form a permutation: on a
// switch (NVSwitch) no GPU serves three readers or writers while another
// idles, as happened with every rank starting at rank 0 (measured on
// 4xH200: reduce-scatter reading at 167 GB/s per GPU, docs/PERF.md).
func (p *directPlane) rotated() []int {
	peers := make([]int, 0, p.n-1)
	for i := 1; i < p.n; i++ {
		peers = append(peers, (p.me+i)%p.n)
	}
	return peers
}

func (p *directPlane) note(r traceRec) {
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

// Quiesce waits for this rank's flag kernels, which the peers' kernels write
// into, to end (plane.Plane).
func (p *directPlane) Quiesce() error {
	if p.flag == nil {
		return nil
	}
	return p.flag.quiesce()
}

// Close releases everything (plane.Plane); without a clean close the flag
// regions stay allocated, since a peer's kernel may still write into them.
func (p *directPlane) Close(clean bool) error {
	if !clean && p.flag != nil {
		p.flag.leak = true
	}
	return p.close()
}

// AsyncError is the flag kernels' error word, decoded (plane.Plane).
func (p *directPlane) AsyncError() error { return p.flagError() }

// LinkShares is the bytes' split over NVLink and PCIe (plane.Plane).
func (p *directPlane) LinkShares() map[string]float64 { return p.linkShares() }
