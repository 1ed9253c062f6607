package direct

import (
	"sync"
	"time"

	"flexlink/fabric/balance"
	"flexlink/gpu"
)

// The PCIe share of the direct plane: FlexLink's second link between two
// GPUs of one host. NVLink copy engines carry most of a large push; a
// share chosen by a fabric/balance planner goes over PCIe, staged through
// host memory: the sender copies it device-to-host into a pinned buffer it
// shares with the receiver, and the receiver copies it host-to-device into
// its recv buffer. On 2×H200 that moved a GiB 11% faster one way and 6%
// faster both ways than NVLink alone (DESIGN.md).
//
// # Staging
//
// Every ordered pair (sender i, receiver j) has its own staging buffer
// (FLEXLINK_PCIE_STAGING_BYTES, default 64 MiB): an anonymous memfd that i
// creates, maps and registers as pinned memory, and that j opens through
// /proc/<pid of i>/fd/<fd>, maps and registers too (gpu.SharedHost). The
// (pid, fd, length, inode) and pcieSlots IPC events per pair travel in the
// setup exchange of Comm.Device; a third exchange tells every sender which
// receivers mapped its buffer, and only those pairs use PCIe (a receiver
// that cannot open it, say another user's /proc, costs the pair its PCIe
// share, not the job). Nothing can leak: the memfd has no name in any file
// system and the kernel frees it with the last mapping, at Close or when
// both processes die; the senders close their descriptors once every
// receiver has mapped the buffer.
//
// # One call (gpu_pcie_call.go)
//
// Before its ready message, sender i asks the pair's planner how to split
// the B bytes it will push to j in this call (allgather and alltoall
// blocks, the read allreduce's result pushes; the push allreduce stays on
// NVLink). Its ready message tells j whether its done message will carry a
// staging table. During the work, each push keeps its head on the copy
// lanes and gives its tail (the PCIe share of it, page-aligned) to i's
// copy stream toward j: D2H into the staging buffer, back to back. The
// buffer is cut into up to pcieSlots slots; after the last copy into a
// slot, i records that slot's IPC event. i's done message lists where each
// staged piece goes in j's recv; j, which has now waited on i's done
// event, makes its own copy stream wait on each slot's event and copies
// the slot H2D into its recv, so slot k+1's D2H on i overlaps slot k's H2D
// on j. j's stream then waits for that copy stream before the call ends.
//
// # Why the staging buffer is free when i writes it again
//
// i's D2H of call c+1 runs on a copy stream that first waits on an event
// recorded on i's stream after i's stream waited on j's ready event of
// call c+1. j recorded that ready event on its stream after everything it
// had enqueued before, which includes, at the end of call c, the wait for
// its H2D copies out of the staging buffer. So the D2H of c+1 starts on
// the GPU only after the H2D of c has finished: the existing ready
// handshake already orders the reuse; no new message is needed. The same
// chain orders j's H2D after j's earlier use of its recv buffer (the
// slot events follow i's D2H, which follows j's ready event).
//
// The slot events obey gpu_direct.go's rule for IPC events: i records them
// only in calls with j, after it has j's ready message for that call; j
// waits on them after i's done message of that call and before its own
// call returns, so before it sends the ready message of its next call.
// j waits only on slots that the done message lists, all of which i has
// recorded before sending it. TestGPUEventRecordOrder checks this too.
//
// # Failure
//
// Any error of the PCIe part (a copy that cannot be enqueued, a staging
// table that does not fit the receiver's buffer or staging) fails the call
// like any other error: the job aborts and every rank's call returns an
// error. A PCIe part is never silently dropped.
type pcieState struct {
	staging  int     // bytes per ordered pair; 0: PCIe off
	fixed    float64 // FLEXLINK_PCIE_SHARE; < 0: the planner decides
	minSlot  int     // smallest slot (tests lower it to reach multi-slot paths)
	cacheDir string  // profile cache ("": none)

	tx []*pcieTx // by peer: this rank sending to it (nil: no PCIe toward it)
	rx []*pcieRx // by peer: this rank receiving from it

	cur  [2]int64 // this call's pushed bytes: nvlink, pcie
	mu   sync.Mutex
	last [2]int64 // the last finished call's (LinkShares)

	// Test hooks: fault fails the PCIe part of a copy toward or from peer
	// at where ("d2h", "h2d"); onSplit sees each sender's and receiver's
	// view of a pair's staging table.
	fault   func(where string, peer int) error
	onSplit func(pcieSplitRec)
}

// pcieTx is this rank's sending side toward one peer.
type pcieTx struct {
	peer     int
	key      string // profile cache key
	planner  *balance.Planner
	mem      *gpu.SharedHost
	stream   *gpu.Stream  // D2H copies into mem
	end      *gpu.Event   // joins stream back into the caller's stream
	slots    []*gpu.Event // IPC, one per slot
	observed int          // Observe calls (the profile is saved when > 0)
	logged   map[int]float64
	probe    txProbe

	// This call (pcieBegin resets them).
	bytes     int // B: bytes pushed to the peer over the copy lanes
	plan      int // planned PCIe bytes
	capBytes  int // most PCIe bytes this call can stage
	slotBytes int
	pushed    int  // bytes of pushes seen so far
	staged    int  // PCIe bytes staged so far
	slot      int  // slot being filled, -1: none
	used      bool // the D2H stream has copies since the last join
	sealed    bool // pcieFinish ran: no more staging in this call
	segs      []pcieSeg
}

// pcieSeg is one staged piece: n bytes for offset off of the receiver's
// recv buffer. Pieces lie back to back in the staging buffer.
type pcieSeg struct{ off, n int }

// pcieRx is this rank's receiving side from one peer.
type pcieRx struct {
	mem    *gpu.SharedHost // the peer's staging buffer, mapped here
	stream *gpu.Stream     // H2D copies out of mem
	end    *gpu.Event
	slots  []*gpu.Event // the peer's slot events, opened here
	expect bool         // this call's done message carries a staging table
	probe  rxProbe
}

const (
	pcieSlots    = 16      // slot events per ordered pair: stages of the D2H/H2D pipeline
	pcieMaxSegs  = 128     // entries of a done message's staging table
	pcieAlign    = 4096    // PCIe parts and slots are whole pages
	pcieMinSlot  = 2 << 20 // bytes: smaller copies lose PCIe bandwidth to per-copy cost
	pcieMaxShare = 0.5     // a PCIe part never exceeds half a push, whatever was measured
	pcieRefBytes = 4 * 8   // pid, fd, length, inode

	linkNVLink = 0 // planner link ids
	linkPCIe   = 1
)

// Stage-1 priors of the planner, from DESIGN.md's 2×H200 measurements:
// the copy engine over NVLink with both directions busy, and a staged PCIe
// copy one way (both ways it falls to 34 GB/s, which stage 2 learns). The
// latencies are per-part costs: launching copies and, for PCIe, the
// pipeline's first slot.
const (
	nvlinkPriorBW  = 391e9
	nvlinkPriorLat = 10 * time.Microsecond
	pciePriorBW    = 50e9
	pciePriorLat   = 20 * time.Microsecond
)

// closePCIe waits for the PCIe copies, saves what the planners learnt and
// releases staging buffers, streams and events.
func (p *directPlane) closePCIe() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	x := &p.px
	for _, t := range x.tx {
		if t == nil {
			continue
		}
		if t.observed > 0 && x.cacheDir != "" && t.planner != nil {
			if err := balance.SaveProfile(x.cacheDir, t.key, t.planner.State()); err != nil {
				p.c.Log().Warn("gpu pcie: profile not saved", "error", err)
			}
		}
		keep(t.close())
	}
	for _, r := range x.rx {
		if r != nil {
			keep(r.close())
		}
	}
	x.tx, x.rx = nil, nil
	return first
}

func (t *pcieTx) close() error {
	evs := append([]*gpu.Event{t.end, t.probe.t0}, t.slots...)
	return closeCopier(t.stream, append(evs, t.probe.lanes...), t.mem)
}

func (r *pcieRx) close() error {
	evs := append([]*gpu.Event{r.end, r.probe.t0, r.probe.end}, r.slots...)
	return closeCopier(r.stream, evs, r.mem)
}

// closeCopier synchronizes s, then closes it, the events and the staging
// mapping (nil entries are skipped).
func closeCopier(s *gpu.Stream, evs []*gpu.Event, mem *gpu.SharedHost) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if s != nil {
		keep(s.Synchronize())
		keep(s.Close())
	}
	for _, e := range evs {
		if e != nil {
			keep(e.Close())
		}
	}
	if mem != nil {
		keep(mem.Close())
	}
	return first
}
