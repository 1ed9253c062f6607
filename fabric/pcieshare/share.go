// Package pcieshare is the PCIe share of the direct GPU plane's large
// pushes: FlexLink's second link between two GPUs of one host. NVLink copy
// engines carry most of a large push; a share chosen by a fabric/balance
// planner goes over PCIe, staged through host memory: the sender copies it
// device-to-host into a pinned buffer it shares with the receiver, and the
// receiver copies it host-to-device into its recv buffer. On 2×H200 that
// moved a GiB 11% faster one way and 6% faster both ways than NVLink alone
// (DESIGN.md).
//
// The plane (collectives/direct) decides which bytes of each push go here
// (its per-call split) and drives the share through fabric/linkshare's
// Share, like every share: Begin (the call's split), Stage (a push's PCIe
// part, D2H), Complete (after the work: the last slot recorded, the D2H
// joined), Send (nothing: the staging table rides in the plane's done
// message), Receive (after the done handshake: H2D out of the peers'
// staging) and Probe (timing the NVLink lanes of timed pushes). The ready
// and done messages carry the share's words (ReadyWords, Ready,
// DoneMessage, DoneLen); the plane moves them. It is the first share of
// fabric/shares' list: it takes the tail of each push.
//
// # Staging (fabric/pcie)
//
// Every ordered pair (sender i, receiver j) has its own staging buffer
// (FLEXLINK_PCIE_STAGING_BYTES, default 64 MiB): an anonymous memfd that i
// creates, maps and registers as pinned memory, and that j opens through
// /proc/<pid of i>/fd/<fd>, maps and registers too (gpu.SharedHost). The
// (pid, fd, length, inode) and pcie.Slots IPC events per pair travel in the
// plane's setup exchange (Offer); a third exchange tells every sender
// which receivers mapped its buffer, and only those pairs use PCIe (Open:
// a receiver that cannot open it, say another user's /proc, costs the pair
// its PCIe share, not the job). Nothing can leak: the memfd has no name in
// any file system and the kernel frees it with the last mapping, at Close
// or when both processes die; the senders close their descriptors once
// every receiver has mapped the buffer.
//
// # One call (call.go)
//
// Before its ready message, sender i takes from the plane's split how many
// of the B bytes it will push to j in this call go over PCIe (allgather
// and alltoall blocks, the read allreduce's result pushes; the push
// allreduce stays on NVLink). Its ready message tells j whether its done
// message will carry a staging table. During the work, each push keeps
// its head on the copy lanes and gives its tail (the PCIe share of it,
// page-aligned) to i's copy stream toward j: D2H into the staging buffer,
// back to back. The buffer is cut into up to pcie.Slots slots; after the
// last copy into a slot, i records that slot's IPC event. i's done message
// lists where each staged piece goes in j's recv; j, which has now waited
// on i's done event, makes its own copy stream wait on each slot's event
// and copies the slot H2D into its recv, so slot k+1's D2H on i overlaps
// slot k's H2D on j. j's stream then waits for that copy stream before the
// call ends.
//
// # Why the staging buffer is free when i writes it again
//
// i's D2H of call c+1 runs on a copy stream that first waits on an event
// recorded on i's stream after i's stream waited on j's ready event of
// call c+1. j recorded that ready event on its stream after everything it
// had enqueued before, which includes, at the end of call c, the wait for
// its H2D copies out of the staging buffer. So the D2H of c+1 starts on
// the GPU only after the H2D of c has finished: the plane's ready
// handshake already orders the reuse; no new message is needed. The same
// chain orders j's H2D after j's earlier use of its recv buffer (the slot
// events follow i's D2H, which follows j's ready event).
//
// The slot events obey the plane's rule for IPC events: i records them
// only in calls with j, after it has j's ready message for that call; j
// waits on them after i's done message of that call and before its own
// call returns, so before it sends the ready message of its next call.
// j waits only on slots that the done message lists, all of which i has
// recorded before sending it. The Trace hook shows every record and wait
// (collectives/direct's TestGPUEventRecordOrder checks them).
//
// # A rider
//
// A second staged link may ride with these pairs (the net share,
// fabric/netshare): it uses the pairs' planners (Open adds
// its link) and timing probes; its parts on a pair are a Tx's and an Rx's
// Rider.
//
// # Failure
//
// Any error of the PCIe part (a copy that cannot be enqueued, a staging
// table that does not fit the receiver's buffer or staging) fails the call
// like any other error: the job aborts and every rank's call returns an
// error. A PCIe part is never silently dropped.
package pcieshare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/linkshare"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
)

// Link ids in the pairs' planners (and the plane's byte counts).
const (
	LinkNVLink = 0
	LinkPCIe   = 1
	LinkRider  = 2 // the rider's link (the net share)
)

// Host is what the share needs of the communicator: a logger and the
// hosts' names for errors.
type Host interface {
	Log() hclog.Logger
	Host() string
	PeerHost(rank int) string
}

// Settings are the PCIe share's settings as resolved for a plane.
type Settings struct {
	Staging  int     // bytes per ordered pair; 0: PCIe off
	Fixed    float64 // FLEXLINK_PCIE_SHARE; < 0: the planner decides
	MinSlot  int     // smallest slot (pcie.MinSlot; tests lower it to reach multi-slot paths)
	CacheDir string  // profile cache ("": none)
}

// Lanes is the copy lanes toward one peer as the probes time them.
type Lanes = linkshare.Lanes

// Trace is one record (Wait false) or wait of a slot event.
type Trace = linkshare.Trace

// Config is what New needs.
type Config struct {
	Settings
	Host      Host
	Dev       *gpu.Device
	N, Me     int
	LaneCount int                  // copy lanes toward each peer (timing events per probe)
	Lanes     func(peer int) Lanes // the lanes toward peer
	Count     func(bytes int)      // PCIe bytes staged (the plane's link counts)
	Trace     func(Trace)          // nil: none
	// Rider is the link of the share riding with the pairs (nil, or
	// returning nil: none), asked in Open, after every share's Offer.
	Rider func() *balance.LinkSpec
}

// Share is one rank's PCIe share: its sending and receiving sides toward
// every peer and the running call's part.
type Share struct {
	Config
	call  uint64         // this call's number (Begin), for the trace
	plan  linkshare.Plan // this call's split (Begin)
	words [][]byte       // by peer: its words of this call's ready message (Ready, read in Start)

	tx []*Tx // by peer: this rank sending to it (nil: no PCIe toward it)
	rx []*Rx // by peer: this rank receiving from it

	// Test hooks: Fault fails the PCIe part of a copy toward or from peer
	// at where ("d2h", "h2d"); OnSplit sees each sender's and receiver's
	// view of a pair's staging table; Emulate rewrites the timings fed to
	// the planners (emulated link rates).
	Fault   func(where string, peer int) error
	OnSplit func(SplitRec)
	Emulate func(peer int, obs []balance.Observation)
}

// New makes the share; Offer and Open set its pairs up.
func New(cfg Config) *Share { return &Share{Config: cfg, words: make([][]byte, cfg.N)} }

// Tx is this rank's sending side toward one peer.
type Tx struct {
	*pcie.Tx                  // staging buffer, D2H stream, join event, slot events
	Peer     int              // the receiving rank
	Key      string           // profile cache key
	Planner  *balance.Planner // the pair's planner (a rider may replace it at setup)
	Cached   bool             // the planner came from the profile cache
	Observed int              // Observe calls (the profile is saved when > 0)
	Rider    TxRider          // the rider's part toward the peer; nil: none
	logged   map[int]float64
	probe    txProbe
	part     Part // this call's part (Begin resets it)
}

// Rx is this rank's receiving side from one peer.
type Rx struct {
	*pcie.Rx         // the peer's staging buffer mapped here, H2D stream, join and slot events
	Rider    RxRider // the rider's part from the peer; nil: none
	expect   bool    // this call's done message carries a staging table
	riderNs  uint64  // the report on the peer's last timed rider part (ReadyWords; RiderReport)
	probe    rxProbe
}

// TxRider is what the pair's probe asks of the rider's sending side.
type TxRider interface {
	Planned() bool  // the call has a rider part toward the peer
	Staged() int    // its bytes staged so far
	Report() uint64 // the peer's report on the last timed rider part (ns; 0: none)
}

// RxRider is what the pair's probe asks of the rider's receiving side.
type RxRider interface {
	Expects() bool        // the peer sends a rider part in this call
	TimedEnd() *gpu.Event // the end of a timed rider part (nil: none timed)
	Untime()              // the pending probe is over
}

// Part is one call's staged part toward a peer, as it fills: the plan,
// the bytes and slots staged, and the table of where they go. The rider
// fills one of its own the same way (Stage on Part).
type Part struct {
	Bytes  int // B: bytes pushed to the peer over the copy lanes
	Plan   pcie.Plan
	Staged int        // bytes staged so far
	Slot   int        // slot being filled, -1: none
	Used   bool       // the D2H stream has copies since the last join
	Sealed bool       // the call's copies are joined: no more staging
	Segs   []pcie.Seg // where the staged pieces go in the peer's recv
}

// Reset starts a call's part of b bytes with plan pl.
func (p *Part) Reset(b int, pl pcie.Plan) {
	*p = Part{Bytes: b, Plan: pl, Slot: -1, Segs: p.Segs[:0]}
}

// CanStage returns why rank me may not stage more of its kind part ("pcie",
// "net") toward rank j now: the call's copies are joined (a bug), or the
// test hook fault (nil: none) fails it at "d2h".
func (p *Part) CanStage(me, j int, kind string, fault func(where string, peer int) error) error {
	if p.Sealed {
		return fmt.Errorf("rank %d: %s part toward rank %d staged after the call's copies were joined (a bug)", me, kind, j)
	}
	if fault != nil {
		if err := fault("d2h", j); err != nil {
			return fmt.Errorf("%s part toward rank %d: %w", kind, j, err)
		}
	}
	return nil
}

// SplitRec is one side's view of a pair's staging table in one call
// (tests compare the sender's and the receiver's).
type SplitRec struct {
	From, To  int
	Call      uint64 // the sender's call number
	Receiver  bool   // recorded by the receiver
	SlotBytes int
	Segs      []pcie.Seg
	Bytes     int // sender: bytes planned for the pushes; receiver: 0
	Pushed    int // sender: bytes the pushes carried
}

// Stage-1 priors of the planner (the bandwidths exported for tests that
// build planners of their own), from DESIGN.md's 2×H200 measurements:
// the copy engine over NVLink with both directions busy, and a staged PCIe
// copy one way (both ways it falls to 34 GB/s, which stage 2 learns). The
// latencies are per-part costs: launching copies and, for PCIe, the
// pipeline's first slot.
const (
	NVLinkPriorBW  = 391e9
	nvlinkPriorLat = 10 * time.Microsecond
	PCIePriorBW    = 50e9
	pciePriorLat   = 20 * time.Microsecond
)

// On reports whether some pair has PCIe staging.
func (x *Share) On() bool { return x.tx != nil }

// Kind is the share's link: pcie.
func (x *Share) Kind() fabric.Kind { return fabric.KindPCIe }

// Has reports whether the pair toward peer j has PCIe staging.
func (x *Share) Has(j int) bool { return x.Tx(j) != nil }

// Spec is how the plane's split sizes the PCIe parts.
func (x *Share) Spec() linkshare.Spec {
	return linkshare.Spec{Fixed: x.Fixed, Max: pcie.MaxShare, Staging: x.Staging, MinSlot: x.MinSlot}
}

// Tx is the sending side toward peer j (nil: none).
func (x *Share) Tx(j int) *Tx {
	if x.tx == nil {
		return nil
	}
	return x.tx[j]
}

// Rx is the receiving side from peer j (nil: none).
func (x *Share) Rx(j int) *Rx {
	if x.rx == nil {
		return nil
	}
	return x.rx[j]
}

// Call is the running call's number (Begin).
func (x *Share) Call() uint64 { return x.call }

func (x *Share) note(r Trace) {
	if x.Trace != nil {
		x.Trace(r)
	}
}

// Close waits for the PCIe copies, saves what the planners learnt and
// releases staging buffers, streams and events. A rider closes its parts
// first.
func (x *Share) Close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, t := range x.tx {
		if t == nil {
			continue
		}
		if t.Observed > 0 && x.CacheDir != "" && t.Planner != nil {
			if err := balance.SaveProfile(x.CacheDir, t.Key, t.Planner.State()); err != nil {
				x.Host.Log().Warn("gpu pcie: profile not saved", "error", err)
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

func (t *Tx) close() error {
	return CloseEvents(append([]*gpu.Event{t.probe.t0}, t.probe.lanes...), t.Tx.Close())
}

func (r *Rx) close() error {
	return CloseEvents([]*gpu.Event{r.probe.t0, r.probe.end}, r.Rx.Close())
}

// CloseEvents closes the events evs (nil entries are skipped) after
// something closed with err; it returns the first error.
func CloseEvents(evs []*gpu.Event, err error) error {
	for _, e := range evs {
		if e != nil {
			if cerr := e.Close(); err == nil {
				err = cerr
			}
		}
	}
	return err
}

// BlobBytes is one rank's part of the plane's setup exchange: per rank,
// the reference of the staging buffer toward it and its slot events.
func (x *Share) BlobBytes() int { return x.N * pcie.RefBytes }

// Offer creates a staging buffer, a copy stream and slot events toward
// every peer and writes their references into b. A staging buffer that
// cannot be made (memfd, mapping or registration refused) only takes that
// pair's PCIe share away: its reference stays zero.
func (x *Share) Offer(_ context.Context, b []byte) error {
	if x.Staging == 0 {
		return nil
	}
	x.tx, x.rx = make([]*Tx, x.N), make([]*Rx, x.N)
	for j := 0; j < x.N; j++ {
		if j == x.Me {
			continue
		}
		tx, err := pcie.NewTx(x.Dev, x.Staging)
		if errors.Is(err, pcie.ErrNoStaging) {
			x.Host.Log().Warn("gpu pcie: no staging buffer, this pair stays on nvlink", "peer", j, "error", err)
			continue
		}
		if err != nil {
			return err
		}
		x.tx[j] = &Tx{Tx: tx, Peer: j, logged: map[int]float64{}, part: Part{Slot: -1}}
		if err := tx.PutRef(b[j*pcie.RefBytes:]); err != nil {
			return err
		}
	}
	return nil
}

// Open maps every peer's staging buffer toward this rank and opens its
// slot events (blobs[r] is rank r's part), then agrees with the peers
// (o.Agree) on which pairs use PCIe, and gives each such pair its planner,
// with the rider's link (Config.Rider) as its third when there is one. It
// is collective whenever some rank offered a staging buffer, which every
// rank sees alike. o.Bus[r] is rank r's GPU's PCI bus id (the profiles'
// key).
func (x *Share) Open(ctx context.Context, blobs [][]byte, o linkshare.Open) error {
	offered := false
	for r, b := range blobs {
		for j := 0; j < x.N; j++ {
			if j != r && pcie.Offered(b[j*pcie.RefBytes:]) {
				offered = true
			}
		}
	}
	if !offered {
		return nil
	}
	mask := make([]byte, x.N)
	for j := 0; j < x.N && x.rx != nil; j++ {
		if j == x.Me {
			continue
		}
		w := blobs[j][x.Me*pcie.RefBytes:]
		if !pcie.Offered(w) {
			continue
		}
		rx, err := pcie.OpenRx(x.Dev, w)
		if err != nil {
			x.Host.Log().Warn("gpu pcie: cannot map a peer's staging buffer, that pair stays on nvlink", "peer", j, "error", err)
			continue
		}
		x.rx[j], mask[j] = &Rx{Rx: rx}, 1
	}
	all := make([]byte, x.N*x.N)
	if err := o.Agree(ctx, mask, all); err != nil {
		return fmt.Errorf("agree on pcie staging: %w", err)
	}
	var rider *balance.LinkSpec
	if x.Rider != nil {
		rider = x.Rider()
	}
	for j, t := range x.tx {
		if t == nil {
			continue
		}
		if all[j*x.N+x.Me] != 1 {
			x.tx[j] = nil
			if err := t.close(); err != nil {
				return err
			}
			continue
		}
		if err := t.Mem.CloseFD(); err != nil {
			return err
		}
		if err := x.plannerFor(t, o.Bus, rider); err != nil {
			return err
		}
	}
	return nil
}

// plannerFor gives t its planner: the cached profile of this GPU pair
// when there is one for the same links, else the priors.
func (x *Share) plannerFor(t *Tx, bus []string, rider *balance.LinkSpec) error {
	specs := []balance.LinkSpec{
		{ID: LinkNVLink, Kind: fabric.KindNVLink, Bandwidth: NVLinkPriorBW, Latency: nvlinkPriorLat},
		{ID: LinkPCIe, Kind: fabric.KindPCIe, Bandwidth: PCIePriorBW, Latency: pciePriorLat},
	}
	t.Key = fmt.Sprintf("gpu-direct %s %s>%s", x.Host.Host(), bus[x.Me], bus[t.Peer])
	if rider != nil { // the rider's link has profiles of its own
		specs = append(specs, *rider)
		t.Key += " +" + string(rider.Kind)
	}
	from := "priors"
	if x.CacheDir != "" {
		if st, err := balance.LoadProfile(x.CacheDir, t.Key); err == nil {
			if pl, err := balance.Restore(st, specs); err == nil {
				t.Planner, t.Cached, from = pl, true, "profile cache"
			} else {
				x.Host.Log().Debug("gpu pcie: cached profile does not fit", "peer", t.Peer, "error", err)
			}
		}
	}
	if t.Planner == nil {
		pl, err := balance.NewPlanner(specs, nil, balance.Config{})
		if err != nil {
			return err
		}
		t.Planner = pl
	}
	by := "balancer"
	if x.Fixed >= 0 {
		by = fmt.Sprintf("FLEXLINK_PCIE_SHARE=%g", x.Fixed)
	}
	x.Host.Log().Info("gpu pcie link", "peer", t.Peer, "staging", x.Staging, "threshold", t.Planner.Threshold(),
		"from", from, "shares", by)
	return nil
}
