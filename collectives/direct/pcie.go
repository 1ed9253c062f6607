package direct

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
)

// The PCIe share of the direct plane: FlexLink's second link between two
// GPUs of one host. NVLink copy engines carry most of a large push; a
// share chosen by a fabric/balance planner goes over PCIe, staged through
// host memory: the sender copies it device-to-host into a pinned buffer it
// shares with the receiver, and the receiver copies it host-to-device into
// its recv buffer. On 2×H200 that moved a GiB 11% faster one way and 6%
// faster both ways than NVLink alone (DESIGN.md).
//
// # Staging (fabric/pcie)
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
// # One call (pcie_call.go)
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
// The slot events obey direct.go's rule for IPC events: i records them
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
	*peers
	pcieSettings
	lanes *laneSet   // the copy lanes whose NVLink parts the probes time
	stats *linkStats // counts the staged bytes
	call  uint64     // this call's number (begin), for the trace
	plan  *callPlan  // this call's split (begin)

	tx []*pcieTx // by peer: this rank sending to it (nil: no PCIe toward it)
	rx []*pcieRx // by peer: this rank receiving from it
	nx *netState // the net part (netpart*.go), which rides with these pairs; nil: off

	// Test hooks: fault fails the PCIe part of a copy toward or from peer
	// at where ("d2h", "h2d"); onSplit sees each sender's and receiver's
	// view of a pair's staging table.
	fault   func(where string, peer int) error
	onSplit func(pcieSplitRec)
	// emulate, when set (tests), rewrites the timings fed to the planners
	// (emulated link rates).
	emulate func(peer int, obs []balance.Observation)
}

// pcieSettings are the PCIe share's settings as resolved for this plane;
// the flag allreduce's PCIe part (flag_pcie.go) uses them too.
type pcieSettings struct {
	staging  int     // bytes per ordered pair; 0: PCIe off
	fixed    float64 // FLEXLINK_PCIE_SHARE; < 0: the planner decides
	minSlot  int     // smallest slot (tests lower it to reach multi-slot paths)
	cacheDir string  // profile cache ("": none)
}

// pcieTx is this rank's sending side toward one peer.
type pcieTx struct {
	*pcie.Tx // staging buffer, D2H stream, join event, slot events
	peer     int
	key      string // profile cache key
	planner  *balance.Planner
	cached   bool // the planner came from the profile cache
	observed int  // Observe calls (the profile is saved when > 0)
	logged   map[int]float64
	probe    txProbe
	net      *netTx // the pair's net part (netpart.go); nil: none
	txCall          // this call's part (begin resets it)
}

// txCall is one call's PCIe part toward a peer.
type txCall struct {
	bytes     int // B: bytes pushed to the peer over the copy lanes
	plan      int // planned PCIe bytes
	capBytes  int // most PCIe bytes this call can stage
	slotBytes int
	staged    int  // PCIe bytes staged so far
	slot      int  // slot being filled, -1: none
	used      bool // the D2H stream has copies since the last join
	sealed    bool // finish ran: no more staging in this call
	segs      []pcieSeg
}

// pcieSeg is one staged piece (fabric/pcie).
type pcieSeg = pcie.Seg

// pcieRx is this rank's receiving side from one peer.
type pcieRx struct {
	*pcie.Rx      // the peer's staging buffer mapped here, H2D stream, join and slot events
	expect   bool // this call's done message carries a staging table
	probe    rxProbe
	net      *netRx // the pair's net part (netpart.go); nil: none
}

// The staging machinery's constants (fabric/pcie).
const (
	pcieSlots    = pcie.Slots    // slot events per ordered pair: stages of the D2H/H2D pipeline
	pcieMaxSegs  = pcie.MaxSegs  // entries of a done message's staging table
	pcieAlign    = pcie.Align    // PCIe parts and slots are whole pages
	pcieMinSlot  = pcie.MinSlot  // bytes: smaller copies lose PCIe bandwidth to per-copy cost
	pcieMaxShare = pcie.MaxShare // a PCIe part never exceeds half a push, whatever was measured
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

// close waits for the PCIe copies, saves what the planners learnt and
// releases staging buffers, streams and events.
func (x *pcieState) close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	keep(x.nx.close(x.tx, x.rx))
	for _, t := range x.tx {
		if t == nil {
			continue
		}
		if t.observed > 0 && x.cacheDir != "" && t.planner != nil {
			if err := balance.SaveProfile(x.cacheDir, t.key, t.planner.State()); err != nil {
				x.c.Log().Warn("gpu pcie: profile not saved", "error", err)
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
	return closeEvents(append([]*gpu.Event{t.probe.t0}, t.probe.lanes...), t.Tx.Close())
}

func (r *pcieRx) close() error {
	return closeEvents([]*gpu.Event{r.probe.t0, r.probe.end}, r.Rx.Close())
}

// closeEvents closes the probe events evs (nil entries are skipped) after
// the staging ends closed with err; it returns the first error.
func closeEvents(evs []*gpu.Event, err error) error {
	for _, e := range evs {
		if e != nil {
			if cerr := e.Close(); err == nil {
				err = cerr
			}
		}
	}
	return err
}

// Setting up the PCIe share, inside New (setup.go): settings,
// the staging buffers and slot events offered in the second exchange, the
// peers' buffers mapped and the pairs agreed in a third, and a planner per
// pair that uses PCIe, from the profile cache when it has this pair.

// settings reads FLEXLINK_LINKS, FLEXLINK_PCIE_STAGING_BYTES and
// FLEXLINK_PCIE_SHARE into x. The PCIe share is on unless FLEXLINK_LINKS
// names link kinds and pcie is not among them, or the staging size is 0.
func (x *pcieState) settings(cfg PCIeConfig) error {
	kinds, err := namedKinds(cfg.Links)
	if err != nil {
		return err
	}
	st := cfg.StagingBytes
	x.fixed = cfg.Share
	if kinds[fabric.KindPCIe] && !kinds[fabric.KindNVLink] {
		return fmt.Errorf("FLEXLINK_LINKS=%q names pcie without nvlink: the direct GPU path adds pcie to nvlink (name both, or set FLEXLINK_GPU_PATH=staged)",
			cfg.Links)
	}
	if kinds[fabric.KindPCIe] {
		x.staging = pcie.RoundStaging(st)
	}
	x.minSlot = pcieMinSlot
	x.cacheDir = cfg.CacheDir
	return nil
}

// namedKinds is the set of link kinds FLEXLINK_LINKS keeps, every kind
// when it is empty. FilterLinks checks the names, so a typo is an error
// here as everywhere else; host kinds (shm,tcp) are legal and simply keep
// no GPU link beyond NVLink.
func namedKinds(links string) (map[fabric.Kind]bool, error) {
	all := []fabric.Kind{fabric.KindNVLink, fabric.KindPCIe, fabric.KindNet, fabric.KindShm, fabric.KindTCP, fabric.KindFake}
	specs := make([]balance.LinkSpec, len(all))
	for i, k := range all {
		specs[i] = balance.LinkSpec{ID: i, Kind: k, Bandwidth: 1}
	}
	kept, err := balance.FilterLinksBy(specs, links)
	if err != nil {
		return nil, fmt.Errorf("gpu links: %w", err)
	}
	out := map[fabric.Kind]bool{}
	for _, s := range kept {
		out[s.Kind] = true
	}
	if !out[fabric.KindNVLink] && !out[fabric.KindPCIe] {
		out[fabric.KindNVLink] = true // FLEXLINK_LINKS=shm,tcp: about host links only
	}
	return out, nil
}

// pcieBlobBytes is one rank's PCIe part of the setup exchange: per rank,
// the reference of the staging buffer toward it and its slot events.
func pcieBlobBytes(n int) int { return n * pcie.RefBytes }

// offer creates a staging buffer, a copy stream and slot events toward
// every peer and writes their references into b. A staging buffer that
// cannot be made (memfd, mapping or registration refused) only takes that
// pair's PCIe share away: its reference stays zero.
func (x *pcieState) offer(b []byte) error {
	if x.staging == 0 {
		return nil
	}
	x.tx, x.rx = make([]*pcieTx, x.n), make([]*pcieRx, x.n)
	for j := 0; j < x.n; j++ {
		if j == x.me {
			continue
		}
		tx, err := pcie.NewTx(x.dev, x.staging)
		if errors.Is(err, pcie.ErrNoStaging) {
			x.c.Log().Warn("gpu pcie: no staging buffer, this pair stays on nvlink", "peer", j, "error", err)
			continue
		}
		if err != nil {
			return err
		}
		x.tx[j] = &pcieTx{Tx: tx, peer: j, logged: map[int]float64{}, txCall: txCall{slot: -1}}
		if err := tx.PutRef(b[j*pcie.RefBytes:]); err != nil {
			return err
		}
	}
	return nil
}

// open maps every peer's staging buffer toward this rank and opens its
// slot events (blobs[r] is rank r's PCIe part), then agrees with the peers,
// in one more exchange, on which pairs use PCIe. It is collective whenever
// some rank offered a staging buffer, which every rank sees alike.
func (x *pcieState) open(ctx context.Context, blobs [][]byte, bus []string) error {
	offered := false
	for r, b := range blobs {
		for j := 0; j < x.n; j++ {
			if j != r && pcie.Offered(b[j*pcie.RefBytes:]) {
				offered = true
			}
		}
	}
	if !offered {
		return nil
	}
	mask := make([]byte, x.n)
	for j := 0; j < x.n && x.rx != nil; j++ {
		if j == x.me {
			continue
		}
		w := blobs[j][x.me*pcie.RefBytes:]
		if !pcie.Offered(w) {
			continue
		}
		rx, err := pcie.OpenRx(x.dev, w)
		if err != nil {
			x.c.Log().Warn("gpu pcie: cannot map a peer's staging buffer, that pair stays on nvlink", "peer", j, "error", err)
			continue
		}
		x.rx[j], mask[j] = &pcieRx{Rx: rx}, 1
	}
	all := make([]byte, x.n*x.n)
	if err := x.c.Engine().AllGather(ctx, collectives.HostBuffer(mask), collectives.HostBuffer(all), x.n, dtype.Uint8); err != nil {
		return fmt.Errorf("agree on pcie staging: %w", err)
	}
	for j, t := range x.tx {
		if t == nil {
			continue
		}
		if all[j*x.n+x.me] != 1 {
			x.tx[j] = nil
			if err := t.close(); err != nil {
				return err
			}
			continue
		}
		if err := t.Mem.CloseFD(); err != nil {
			return err
		}
		if err := x.plannerFor(t, bus); err != nil {
			return err
		}
	}
	return nil
}

// plannerFor gives t its planner: the cached profile of this GPU pair
// when there is one for the same links, else the priors.
func (x *pcieState) plannerFor(t *pcieTx, bus []string) error {
	specs := []balance.LinkSpec{
		{ID: linkNVLink, Kind: fabric.KindNVLink, Bandwidth: nvlinkPriorBW, Latency: nvlinkPriorLat},
		{ID: linkPCIe, Kind: fabric.KindPCIe, Bandwidth: pciePriorBW, Latency: pciePriorLat},
	}
	t.key = fmt.Sprintf("gpu-direct %s %s>%s", x.c.Host(), bus[x.me], bus[t.peer])
	if x.nx != nil { // the net part's third link has profiles of its own
		specs = append(specs, x.nx.spec())
		t.key += " +net"
	}
	from := "priors"
	if x.cacheDir != "" {
		if st, err := balance.LoadProfile(x.cacheDir, t.key); err == nil {
			if pl, err := balance.Restore(st, specs); err == nil {
				t.planner, t.cached, from = pl, true, "profile cache"
			} else {
				x.c.Log().Debug("gpu pcie: cached profile does not fit", "peer", t.peer, "error", err)
			}
		}
	}
	if t.planner == nil {
		pl, err := balance.NewPlanner(specs, nil, balance.Config{})
		if err != nil {
			return err
		}
		t.planner = pl
	}
	by := "balancer"
	if x.fixed >= 0 {
		by = fmt.Sprintf("FLEXLINK_PCIE_SHARE=%g", x.fixed)
	}
	x.c.Log().Info("gpu pcie link", "peer", t.peer, "staging", x.staging, "threshold", t.planner.Threshold(),
		"from", from, "shares", by)
	return nil
}
