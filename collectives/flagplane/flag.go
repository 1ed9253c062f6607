// Package flagplane is the direct GPU plane's flag kernels
// (gpu/flag.go, gpu/kernels/flag.cu): on ranks of one host whose GPUs reach
// each other, allreduces up to FLEXLINK_GPU_FLAG_BYTES run as one kernel per
// rank that pushes its vector into the peers' slots with SM stores and
// synchronises through counters in device memory. There is no host
// handshake, so a call costs one launch. With two ranks (where pushing the
// whole vector moves as many bytes as a reduce-scatter plus an allgather)
// that is every call; beyond two ranks calls over
// FLEXLINK_GPU_FLAG_ONESHOT_BYTES run two-shot (twoShot: three
// launches, still no host handshake). Reduce-scatters, allgathers,
// alltoalls, broadcasts, reduces and two-rank send/recv up to
// FLEXLINK_GPU_FLAG_COLL_BYTES per peer run as flag kernels too.
//
// collectives/direct owns a Plane and drives it through a small surface:
// New and Setup/Open (its part of the plane's setup exchange), Takes and
// P2P (does a call run here), Call, Err, Quiesce, Release, Memory and
// Close. The files:
//
//	flag.go     the plane: limits, regions, abort watcher, what it takes
//	call.go     one call: the kernel, its grid, the order between calls
//	lazy.go     the regions, made on first use with every rank
//	devmem.go   which communicator holds a device's full-size regions
//	pcie.go     the flag allreduce's PCIe part (two ranks, large region)
//	setup.go    settings, error word, the setup exchange
//	capture.go  CUDA graph capture: ordering and the graphs' hold on memory
//
// Ordering. The kernel touches only this rank's send and recv and the
// peers' flag regions (never their user buffers), so it needs no "ready"
// or "done" events. A rank's flag kernels must run one after another (a
// slot is reused once the peer's next call has started, which proves that
// the peer's previous kernel has finished reading it): every call records
// an event after its kernel, and a call on another stream than the
// previous one waits on it first.
//
// Failure. A wait inside the kernel that outlasts
// FLEXLINK_GPU_KERNEL_TIMEOUT writes an error word in mapped host memory
// and ends the kernel; the next call (and DeviceComm.AsyncError) reports
// it, naming the peer and its host, and the communicator is broken.
package flagplane

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

const (
	flagDepth = 2 // slots per sender and block: step i fills slot i+1 while the peer folds slot i
	// flagLLChunk: a line call's bytes per block. Measured on 2xH200
	// (docs/PERF.md, "Lines"): a replayed allreduce of one block took
	// 6.1 us with 4 KiB, 7.0 with 8 KiB, 12.7 with 32 KiB (the slots and
	// counters: 9.2-10.7 us). 2 KiB (twenty-fourth session, "Line blocks
	// of 2 KiB"): replays of 4-128 KiB 0.4-1 us faster than with 4 KiB in
	// every collective (a block of 4 KiB costs 1 us more than one of 2
	// KiB; two of 2 KiB 0.6 more); 1 KiB gained nothing more.
	flagLLChunk  = 2 << 10
	flagMinChunk = 32 << 10 // bytes: smallest chunk a block takes (1 MiB over 128 blocks of 8 KiB took ~130 µs in most runs on 2xH200, over 32 blocks 14 µs)
	// flagAutoColl: FLEXLINK_GPU_FLAG_COLL_BYTES=-1, the largest per-peer
	// block (and the largest broadcast, reduce or single send) the flag
	// kernels take eagerly. Measured on 2xH200 (docs/PERF.md, "Two H200s,
	// nineteenth session"),
	// nccl-tests 20 calls a row: with 4 MiB, allgather, reduce-scatter and
	// alltoall of 16 MiB took 81-100 us on the handshake paths against
	// 46-53 us as flag kernels (NCCL 53-55), sendrecv of 8 MiB 77 against
	// 45 (NCCL 50); from 32 MiB per peer the handshake paths (copy engines
	// and the PCIe share) are as fast or faster. Broadcasts and reduces of
	// 64 MiB were slower as flag kernels (218 and 226 us against 200 and
	// 201), of 8 and 16 MiB as fast (before, with 4 MiB per peer and four
	// times that for them: 37.9 and 64.7 us against 41.7 and 65.0).
	flagAutoColl     = 16 << 20
	flagAutoOneShot  = 2 << 20  // bytes: FLEXLINK_GPU_FLAG_ONESHOT_BYTES=-1 (more than two ranks)
	flagTwoShotAlign = 256      // bytes: a two-shot allreduce's blocks are multiples of this
	SmallMax         = 32 << 20 // bytes: smaller calls use the small region
	flagBlobFields   = 3        // per region: slot bytes, depth, max blocks
	flagRegionBlob   = flagBlobFields * 8
	flagBlobHead     = 32                                             // enabled, the largest allreduce, the largest other block, the largest one-shot allreduce
	BlobBytes        = flagBlobHead + 2*flagRegionBlob + flagPCIeBlob // then the small and the large region's layouts, the PCIe part
)

// A rank has two flag regions with the same number of blocks: a small one
// (a quarter of FLEXLINK_GPU_FLAG_REGION_BYTES times (n-1)/n) for calls under
// SmallMax and a large one for the rest. Measured on 2xH200 with one
// 128 MiB region (256 KiB slots), calls of 1-16 MiB took 120-160 µs in
// most runs instead of 14-75 µs: their one chunk per block lands in slots
// spread 512 KiB apart over the whole region; with the slots of a 32 MiB
// region they ran at 15 µs (1 MiB) every time, while large calls need the
// large slots (fewer synchronisations per byte). Each region has its own
// counters and fixed slots, so the credit protocol holds in each; a call
// uses one of them.
//
// Regions are made on first use (lazy.go): a communicator holds no
// region until its first flag call, and no large region until its first
// call of SmallMax bytes or more. Only the first communicator of a
// process to make each on a device gets the configured size; the others
// get a small region of flagSecondaryBytes and no large one (their large
// calls use the small region), so an extra communicator costs at most that.
type flagRegion struct {
	layout    gpu.FlagLayout
	mem       *gpu.Buffer
	peers     []*gpu.Buffer // peers' regions mapped here (nil for me)
	secondary bool          // sized for a secondary communicator (flagSecondaryBytes)
}

// peers is the communicator as the flag plane sees it: set once.
type peers struct {
	c     plane.Host
	dev   *gpu.Device
	n, me int
}

// Plane is one rank's flag kernels (nil: off; the methods that say so
// accept a nil Plane).
type Plane struct {
	*peers
	lim         flagLimits
	lines       bool              // FLEXLINK_GPU_FLAG_LINES: small calls send lines (flag.cu, "Lines")
	graphRecord string            // FLEXLINK_GPU_GRAPH_RECORD (capture.go)
	twoShots    uint64            // two-shot allreduces so far (tests)
	regions     [2]flagRegion     // small, large (the large one only when lim.maxBytes reaches SmallMax); nil mem until made
	conf        [2]gpu.FlagLayout // the configured layouts, alike on every rank (setup)
	large       largeState        // whether calls of SmallMax bytes and more have a region of their own
	ctl         gpu.FlagCtl       // what every region's control block holds beside the region's own fields (open)
	claims      [2]bool           // this plane holds its device's primary small / large region (devmem.go)
	timeout     time.Duration     // FLEXLINK_GPU_KERNEL_TIMEOUT (0: none)
	errMem      *gpu.HostMem      // errWords words: 0, the kernels' error word; 1: 1, the source of abort copies; hostAbortWord
	last        *gpu.Event        // after the latest flag kernel
	lastS       *gpu.Stream       // the stream it was recorded on
	calls       uint64
	pcie        *flagPCIe                // the large region's PCIe part (pcie.go); nil: NVLink only
	count       func(nvlink, pcie int64) // a finished call's bytes per link, for LinkShares
	w           flagWatch
	capt        flagCapture // CUDA graph capture (capture.go)
	// captureOnly: the ranks share a GPU, where eager calls take other
	// paths (collectives/direct/setup.go); only captured calls run here.
	captureOnly bool
	holds       graphHolds // the graphs that hold this plane's device memory (capture.go)
	leak        bool       // Close could not agree with the peers: keep the regions (peers may still write)
}

// flagLimits are the largest calls the flag plane takes (bytes); every
// rank must have the same.
type flagLimits struct {
	maxBytes  int // largest allreduce taken
	collBytes int // largest per-peer block of a reduce-scatter, allgather or alltoall taken
	oneShot   int // more than two ranks: largest allreduce pushed whole to every peer; larger ones run two-shot
}

// flagWatch is the abort watcher's state: when the job is aborted (a peer
// lost, a failure on another rank), the watcher (Plane.watch) sets
// this rank's abort words through abortS, so kernels spinning for a peer
// that will never come end at once.
type flagWatch struct {
	mu      sync.Mutex // also guards the regions' mem, which a call sets (lazy.go) while the watcher reads it
	abortS  *gpu.Stream
	stop    chan struct{}
	exited  chan struct{} // closed when the watcher returns
	stopped bool
	fired   bool // the watcher has set the abort words of the regions that existed
}

// flagPoll is how often the watcher looks at the error word.
const flagPoll = 20 * time.Millisecond

// errMem's layout: errWords words, of which hostAbortWord is the host's
// abort word: the watcher sets it when the job is aborted, and the
// kernels' waits read it (flag.cu, host_aborted) beside the region's abort
// word, which a copy sets. That copy can wait behind the caller's other
// work on the copy engines for good (a synchronous copy on the legacy
// stream waiting for a stream that holds a waiting kernel); the host word
// needs no copy.
const (
	errWords      = 3
	hostAbortWord = 2
)

// watch sets this rank's abort words once the job is aborted, and aborts
// the job when a kernel of this rank records an error, until the plane
// closes (stop).
func (f *Plane) watch(done <-chan struct{}, stop <-chan struct{}, failed func()) {
	defer close(f.w.exited)
	tick := time.NewTicker(flagPoll)
	defer tick.Stop()
	for wait := true; wait; {
		select {
		case <-done:
			wait = false
		case <-stop:
			return
		case <-tick.C:
			if atomic.LoadUint64(f.errMem.Word(0)) != 0 {
				failed() // the store's Done fires next
			}
		}
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if f.w.stopped {
		return
	}
	f.w.fired = true // a region made from now on is not used: the call that makes it sees the job's error
	atomic.StoreUint64(f.errMem.Word(hostAbortWord), 1)
	for i := range f.regions {
		if g := &f.regions[i]; g.mem != nil {
			// A copy engine writes the word while the kernel runs; errors
			// here change nothing (the job is failing already).
			_ = f.w.abortS.CopyHtoD(g.mem.Sub(gpu.FlagAbortOffset, 8), f.errMem.Bytes()[8:16])
		}
	}
}

// takes reports whether o runs on the flag plane (false when f is nil):
// allreduces up to maxBytes, reduce-scatters, allgathers and alltoalls whose per-peer block
// is at most collBytes, broadcasts and reduces of at most collBytes.
func (f *Plane) Takes(o *plane.Op) bool {
	if f == nil || f.captureOnly {
		return false
	}
	b := o.Count * o.DT.Size()
	switch o.Kind {
	case plane.AllReduce:
		return b > 0 && b <= f.lim.maxBytes
	case plane.ReduceScatter, plane.AllGather, plane.AllToAll:
		return b > 0 && b <= f.lim.collBytes
	case plane.Broadcast, plane.Reduce:
		return b > 0 && b <= f.lim.collBytes
	}
	return false
}

// p2p reports whether o, a Group, runs as a flag kernel (false when f is
// nil): on two ranks,
// one send to the peer or one receive from it (a pipeline's step) of at
// most collBytes, moved as a broadcast from the sender,
// or one send and one receive of the same size up to collBytes (an
// exchange). Both ranks of a correct program decide alike (each sees the
// same entries and sizes); other groups take the handshake path.
func (f *Plane) P2P(o *plane.Op) bool {
	if f == nil || f.captureOnly {
		return false
	}
	return f.P2PShape(o, f.lim.collBytes)
}

// p2pShape is p2p with limit as the per-peer limit (a capture takes any
// size).
func (f *Plane) P2PShape(o *plane.Op, limit int) bool {
	if f == nil || o.Kind != plane.Group || f.n != 2 {
		return false
	}
	for _, e := range o.P2P {
		if e.Peer == f.me || e.Buf == nil { // a nil buffer: the handshake reports it
			return false
		}
	}
	switch len(o.P2P) {
	case 1:
		b := o.P2P[0].Buf.Len()
		return b > 0 && b <= limit
	case 2:
		a, b := o.P2P[0], o.P2P[1]
		n := a.Buf.Len()
		return a.Send != b.Send && n > 0 && n == b.Buf.Len() && n <= limit
	}
	return false
}

// shape is the grid and chunk (elements) of a call of bytes in a region of
// layout l: blocks of at least flagMinChunk, at most the layout's, chunks
// at most a slot. With ll line blocks (0: no lines) a call of at most ll
// line payloads takes blocks of about flagLLChunk instead, at most ll of
// them, one chunk of at most gpu.FlagLLPay each, which the kernels send as
// lines (flag.cu, "Lines"). Every rank computes the same from the same call.
func shape(l gpu.FlagLayout, bytes, sz, ll int) (grid, chunk int) {
	// A chunk of at least flagMinChunk per block, or a slot's payload where
	// slots are smaller (the small region beyond two ranks): one chunk per
	// block, not a second step for a few blocks.
	least := min(flagMinChunk, (l.SlotBytes-gpu.FlagSlotHeader)/256*256)
	grid = min(l.MaxBlocks, max(1, (bytes+least-1)/least))
	if ll > 0 && bytes <= ll*gpu.FlagLLPay {
		grid = min(l.MaxBlocks, ll, max(1, (bytes+flagLLChunk-1)/flagLLChunk))
	}
	cb := (bytes + grid - 1) / grid
	cb = min(l.SlotBytes-gpu.FlagSlotHeader, (cb+255)/256*256)
	return min(grid, (bytes+cb-1)/cb), cb / sz // rounding up may leave blocks without a chunk
}

// llBlocks is how many blocks of a call in a region of layout l may send
// lines (0: none; FLEXLINK_GPU_FLAG_LINES=0). The region's control
// block holds the same (lazy.go).
func (f *Plane) llBlocks(l gpu.FlagLayout) int {
	if !f.lines {
		return 0
	}
	return l.LLBlocks(f.n)
}

// err reports a failure a flag kernel recorded, or the job's abort
// (which ends the kernels early, their output unwritten), if any; nil when
// f is nil.
func (f *Plane) Err() error {
	if f == nil {
		return nil
	}
	if err := f.wordError(atomic.LoadUint64(f.errMem.Word(0))); err != nil {
		return err
	}
	if f.calls > 0 || f.capt.any {
		if se := f.c.JobErr(); se != nil {
			return fmt.Errorf("flag kernels: the job was aborted, and kernels may have ended early: %w", se)
		}
	}
	return nil
}

// wordError is the error an error word w describes (nil for 0).
func (f *Plane) wordError(w uint64) error {
	e, bad := gpu.DecodeFlagError(w)
	if !bad {
		return nil
	}
	if e.What == 3 {
		return fmt.Errorf("flag kernel (block %d): rank %d on %s called another collective, or another count, dtype or op: %w",
			e.Block, e.Peer, f.c.PeerHost(e.Peer), errs.ErrMismatch)
	}
	what := "room in its slots"
	if e.What == 2 {
		what = "its data"
	}
	return fmt.Errorf("flag kernel (block %d) waited longer than FLEXLINK_GPU_KERNEL_TIMEOUT for %s from rank %d on %s: the peer is gone, stalled, or called a different collective: %w",
		e.Block, what, e.Peer, f.c.PeerHost(e.Peer), errs.ErrTimeout)
}

// quiesce waits for this rank's last flag kernel: after every rank has
// (a barrier), no kernel writes into a region any more and they may go.
// Nothing to wait for when f is nil.
func (f *Plane) Quiesce() error {
	if f == nil || f.lastS == nil && !f.capt.any {
		return nil
	}
	return f.last.Synchronize() // replays record last too
}

func (f *Plane) Close() error {
	f.w.mu.Lock()
	f.w.stopped = true
	if f.w.stop != nil {
		close(f.w.stop)
		f.w.stop = nil
	}
	f.w.mu.Unlock()
	if f.w.exited != nil {
		<-f.w.exited // the watcher reads errMem and may enqueue an abort copy: done with both before they go
		f.w.exited = nil
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if f.w.abortS != nil {
		keep(f.w.abortS.Synchronize()) // an abort copy reads errMem and writes the regions
	}
	if f.pcie != nil {
		keep(f.pcie.close(true))
		f.pcie = nil
	}
	keep(f.freeRegions())
	if f.w.abortS != nil {
		keep(f.w.abortS.Close())
		f.w.abortS = nil
	}
	if m := f.errMem; m != nil {
		if !f.holds.keep(m.Free) { // the kernels of a graph still write errors there
			keep(m.Free())
		}
		f.errMem = nil
	}
	// Graphs wait on and record last (and may hold capt.ev's record):
	// they go with the last graph.
	for _, ev := range []*gpu.Event{f.last, f.capt.ev} {
		if ev != nil && !f.holds.keep(ev.Close) {
			keep(ev.Close())
		}
	}
	f.last, f.capt.ev = nil, nil
	return first
}

// HasPCIe reports whether the flag allreduce has its PCIe part (calls of
// SmallMax bytes and more, whose split the host plans per call).
func (f *Plane) HasPCIe() bool { return f != nil && f.pcie != nil }

// SetCaptureOnly says whether only calls captured in a CUDA graph run
// here (ranks that share a GPU without MPS: eager calls take other
// paths). Every rank sets the same, during the plane's setup.
func (f *Plane) SetCaptureOnly(on bool) { f.captureOnly = on }

// Leak makes Close keep the regions allocated: the ranks could not agree
// on closing, and a peer's kernel may still write into them.
func (f *Plane) Leak() {
	if f != nil {
		f.leak = true
	}
}

// State is what tests and logs read of a plane.
type State struct {
	Calls, TwoShots              uint64      // eager flag calls, of them two-shot allreduces
	MaxBytes, CollBytes, OneShot int         // the limits (FLEXLINK_GPU_FLAG_BYTES, _COLL_BYTES, _ONESHOT_BYTES)
	CaptureOnly                  bool        // only captured calls run here (ranks share a GPU)
	PCIe                         bool        // the flag allreduce's PCIe part is on
	PCIeObserved, PCIePending    int         // rank 0: calls its balancer observed, calls whose times it awaits
	LastPCIe                     int         // the PCIe part (elements) of the latest started call, as its kernel wrote it
	Graphs, Kept                 int         // CUDA graphs holding the plane's memory, frees kept for them
	Small                        *gpu.Buffer // the small region (nil: not made)
}

// State reads the plane's counters (tests; between calls).
func (f *Plane) State() State {
	st := State{Calls: f.calls, TwoShots: f.twoShots, MaxBytes: f.lim.maxBytes, CollBytes: f.lim.collBytes,
		OneShot: f.lim.oneShot, CaptureOnly: f.captureOnly, PCIe: f.pcie != nil}
	if x := f.pcie; x != nil {
		st.PCIeObserved, st.PCIePending, st.LastPCIe = x.bal.observed, len(x.bal.pend), x.lastPCIe()
	}
	st.Graphs, st.Kept = f.holds.held()
	f.w.mu.Lock()
	st.Small = f.regions[0].mem
	f.w.mu.Unlock()
	return st
}

// GraphsFreed returns a channel closed once the memory kept for CUDA
// graphs has been freed (tests); nil when nothing is kept.
func (f *Plane) GraphsFreed() <-chan struct{} { return f.holds.freed() }
