package flagplane

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric/pcieshare"
	"github.com/flexlink/flexlink/gpu"
)

// Setting up the flag plane (flag.go): its settings, this rank's error
// word and PCIe part, and the setup exchange that checks that every rank
// has the same settings. The regions are made on first use (lazy.go).

// Config holds the flag kernels' settings (-1: automatic, 0: off).
type Config struct {
	Bytes, CollBytes, OneShotBytes int           // FLEXLINK_GPU_FLAG_BYTES, _COLL_BYTES, _ONESHOT_BYTES
	Blocks, RegionBytes            int           // FLEXLINK_GPU_FLAG_BLOCKS, _REGION_BYTES
	PCIeBlocks                     int           // FLEXLINK_GPU_FLAG_PCIE_BLOCKS (0..32)
	KernelTimeout                  time.Duration // FLEXLINK_GPU_KERNEL_TIMEOUT
	// Enqueue: FLEXLINK_GPU_ENQUEUE=async: the flag kernels take every
	// size of the collectives and two-rank send/recv they serve (as in a
	// CUDA graph capture), so those calls never wait on the host.
	Enqueue bool
	// Lines: FLEXLINK_GPU_FLAG_LINES: small calls send lines that carry
	// their own flags (flag.cu, "Lines"); every rank must agree.
	Lines bool
	// GraphRecord: FLEXLINK_GPU_GRAPH_RECORD: how a captured call records
	// its end (capture.go): "chain", "branch", or "auto" (or ""): a branch
	// for a call of one block, the chain otherwise.
	GraphRecord string
	// PerGPU is the most ranks of the plane on one GPU (direct.New sets it
	// from the ranks' bus ids): their flag kernels split its SMs.
	PerGPU int
}

// New is the flag plane of rank h.Rank() on dev with settings cfg; nil
// when it is off (the settings, or more ranks than gpu.FlagMaxRanks).
// captureOnly keeps it for calls captured in a CUDA graph (ranks that
// share a GPU); count sees each finished eager call's bytes per link.
// Setup and Open follow, inside the plane's setup exchange.
func New(h plane.Host, dev *gpu.Device, cfg Config, captureOnly bool, count func(nvlink, pcie int64)) (*Plane, error) {
	pr := &peers{c: h, dev: dev, n: h.Size(), me: h.Rank()}
	// -1 is each limit's automatic value; 0 turns the flag allreduce (and
	// with it the plane) or the other collectives' kernels off.
	var maxBytes, coll, oneShot int
	for _, l := range []struct {
		v    int
		to   *int
		auto int
	}{
		{cfg.Bytes, &maxBytes, 1 << 62}, // every size: one-shot with 2 ranks, two-shot beyond FLEXLINK_GPU_FLAG_ONESHOT_BYTES with more
		{cfg.CollBytes, &coll, flagAutoColl},
		{cfg.OneShotBytes, &oneShot, flagAutoOneShot},
	} {
		*l.to = l.v
		if l.v == -1 {
			*l.to = l.auto
		}
	}
	if pr.n == 2 {
		oneShot = flagAutoOneShot // unused with two ranks: ranks that set it differently still agree
	}
	if cfg.Enqueue && coll != 0 {
		// Enqueue and return: every size, as a captured call (the kernels
		// loop over their slots); the copy-engine paths wait on the host.
		coll = 1 << 62
	}
	if maxBytes == 0 || pr.n < 2 || pr.n > gpu.FlagMaxRanks {
		return nil, nil
	}
	blocks, budget := cfg.Blocks, cfg.RegionBytes
	// Blocks wait for their peers' blocks: never more than the GPU runs at
	// once (one per SM is always resident). Ranks that share a GPU (under
	// MPS their kernels run at once) split its SMs: on one H200 under MPS a
	// 4-rank 64 MiB allreduce of a full grid each waited for good. Ranks on
	// different GPUs that end up with different layouts turn the flag plane
	// off (open).
	blocks = min(blocks, max(1, pr.dev.Multiprocessors()/max(1, cfg.PerGPU)))
	f := &Plane{peers: pr, count: count, captureOnly: captureOnly, lim: flagLimits{maxBytes: maxBytes, collBytes: coll, oneShot: oneShot}, lines: cfg.Lines, graphRecord: cfg.GraphRecord}
	f.holds.log = pr.c.Log().Warn
	// The small region: a quarter of the budget spread as if over n
	// senders (64 KiB slots with two ranks and 128 blocks: small calls want
	// their slots close together, docs/PERF.md); the large region: the whole
	// budget over the n-1 peers' slots (512 KiB).
	for i, b := range []int{budget / 4 * (f.n - 1) / f.n, budget} {
		slot := b / ((f.n - 1) * max(blocks, 1) * flagDepth) / 256 * 256
		l := gpu.FlagLayout{SlotBytes: slot, Depth: flagDepth, MaxBlocks: blocks}
		if err := l.Check(); err != nil {
			return nil, fmt.Errorf("FLEXLINK_GPU_FLAG_BLOCKS=%d, FLEXLINK_GPU_FLAG_REGION_BYTES=%d: %w", blocks, budget, err)
		}
		f.conf[i] = l
	}
	return f, nil
}

// Setup makes this rank's error word, and its PCIe part's inbox when
// pcieBlocks (FLEXLINK_GPU_FLAG_PCIE_BLOCKS) and the PCIe share's settings
// px allow one, and writes its part of the setup exchange into b: the
// limits and the configured region layouts, which every rank must share.
// The regions themselves are made on first use (lazy.go). b is
// BlobBytes long.
func (f *Plane) Setup(b []byte, px pcieshare.Settings, pcieBlocks int) (err error) {
	if f.errMem, err = f.dev.AllocHost(errWords * 8); err != nil {
		return fmt.Errorf("gpu flag error word: %w", err)
	}
	atomic.StoreUint64(f.errMem.Word(0), 0)
	atomic.StoreUint64(f.errMem.Word(1), 1)
	atomic.StoreUint64(f.errMem.Word(hostAbortWord), 0)
	if f.last, err = f.dev.NewEvent(false); err != nil {
		return err
	}
	if f.w.abortS, err = f.dev.NewStream(); err != nil {
		return err
	}
	le := binary.LittleEndian
	le.PutUint64(b, f.head())
	le.PutUint64(b[8:], uint64(f.lim.maxBytes))
	le.PutUint64(b[16:], uint64(f.lim.collBytes))
	le.PutUint64(b[24:], uint64(f.lim.oneShot))
	for i, l := range f.conf {
		w := b[flagBlobHead+i*flagRegionBlob:]
		for k, v := range []uint64{uint64(l.SlotBytes), uint64(l.Depth), uint64(l.MaxBlocks)} {
			le.PutUint64(w[8*k:], v)
		}
	}
	return f.offerPCIe(b[flagBlobHead+2*flagRegionBlob:], px, pcieBlocks)
}

// head is the setup blob's first word: 1 (the flag plane is on), plus 2
// with lines (every rank must agree: the kernels choose lines from the
// call's shape and their control block).
func (f *Plane) head() uint64 {
	if f.lines {
		return 3
	}
	return 1
}

// Open checks that every rank has the same limits and layouts (blobs[r]
// is rank r's flag part), sets up the PCIe part, and keeps what the
// regions' control blocks will hold; timeout is FLEXLINK_GPU_KERNEL_TIMEOUT.
// Every rank sees the same blobs, so all keep the flag plane or all drop
// it: off says it is dropped (and closed), and the caller forgets it.
func (f *Plane) Open(ctx context.Context, blobs [][]byte, bus []string, timeout time.Duration) (off bool, err error) {
	le := binary.LittleEndian
	for r, b := range blobs {
		ok := le.Uint64(b) == f.head() && le.Uint64(b[8:]) == uint64(f.lim.maxBytes) && le.Uint64(b[16:]) == uint64(f.lim.collBytes) &&
			le.Uint64(b[24:]) == uint64(f.lim.oneShot)
		for i := range f.regions {
			w := b[flagBlobHead+i*flagRegionBlob:]
			l := gpu.FlagLayout{SlotBytes: int(le.Uint64(w)), Depth: int(le.Uint64(w[8:])), MaxBlocks: int(le.Uint64(w[16:]))}
			ok = ok && l == f.conf[i]
		}
		if !ok {
			f.c.Log().Info("gpu flag allreduce off", "why", fmt.Sprintf("rank %d on %s has it off or other settings", r, f.c.PeerHost(r)))
			return true, f.Close()
		}
	}
	host, err := f.openPCIe(ctx, blobs, bus) // collective: before any local step that may fail
	if err != nil {
		return false, err
	}
	ptr, err := f.errMem.DevicePtr()
	if err != nil {
		return false, err
	}
	timeoutNs := uint64(timeout.Nanoseconds())
	if timeout <= 0 {
		timeoutNs = 1 << 62 // no deadline: a lost peer still ends the kernels through the abort watcher
	}
	f.ctl = gpu.FlagCtl{ErrHost: uint64(ptr), TimeoutNs: timeoutNs, Ranks: f.n, Me: f.me}
	f.timeout = max(timeout, 0)
	if x := f.pcie; x != nil {
		times, err := x.times.DevicePtr()
		if err != nil {
			return false, err
		}
		f.ctl.Host, f.ctl.HostSlot, f.ctl.HostBlocks, f.ctl.Times = host, x.slot, x.blocks, uint64(times)
	}
	f.w.stop, f.w.exited = make(chan struct{}), make(chan struct{})
	go f.watch(f.c.JobDone(), f.w.stop, func() {
		// A kernel of this rank failed (timeout, mismatch): abort the job
		// now, so the peers' kernels end too, rather than at this rank's
		// next call.
		if err := f.wordError(atomic.LoadUint64(f.errMem.Word(0))); err != nil {
			f.c.AbortJob(fmt.Errorf("rank %d on %s: %w", f.c.WorldRank(), f.c.Host(), err))
		}
	})
	return false, nil
}

// flagPCIeBlocks is FLEXLINK_GPU_FLAG_PCIE_BLOCKS (n) as it applies: 0
// when the PCIe part is off for this plane (more than two ranks,
// FLEXLINK_LINKS without pcie, no staging).
func (f *Plane) pcieBlocks(n int, px pcieshare.Settings) (int, error) {
	if f.n != 2 || px.Staging == 0 {
		return 0, nil
	}
	return n, nil
}

// offerPCIe makes this rank's PCIe part's inbox and times array (when the
// part is on here: pcieBlocks, px) and writes its part of the setup blob
// into b.
func (f *Plane) offerPCIe(b []byte, px pcieshare.Settings, pcieBlocks int) error {
	large := f.conf[1]
	if f.lim.maxBytes < SmallMax {
		return nil // no call reaches the large region
	}
	blocks, err := f.pcieBlocks(pcieBlocks, px)
	if err != nil || blocks == 0 {
		return err
	}
	nvcap := min(large.MaxBlocks, f.dev.Multiprocessors()-blocks)
	if nvcap < 1 {
		return nil
	}
	x := &flagPCIe{peers: f.peers, blocks: blocks, slot: large.SlotBytes, nvcap: nvcap,
		bal: flagBalancer{logged: map[int]float64{}, fixed: px.Fixed, dir: px.CacheDir}}
	ctl := gpu.FlagCtl{Layout: large, HostSlot: x.slot, HostBlocks: blocks}
	if x.inbox, err = f.dev.NewSharedHost(ctl.InboxBytes(f.n)); err != nil {
		f.c.Log().Warn("gpu flag allreduce: no pcie inbox, NVLink only", "error", err)
		return nil
	}
	if x.times, err = f.dev.AllocHost(8 * (gpu.FlagMaxBlocks + 1)); err != nil {
		f.c.Log().Warn("gpu flag allreduce: no times array for the pcie part, NVLink only", "error", err)
		return x.close(false)
	}
	clear(x.times.Bytes()) // no call's times yet (pinned allocations are not zeroed)
	f.pcie = x
	ref := x.inbox.Ref()
	for i, v := range []uint64{uint64(blocks), uint64(x.slot), uint64(nvcap), uint64(ref.PID), uint64(ref.FD), uint64(ref.Len), ref.Ino} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return nil
}

// openPCIe maps the peer's inbox when both ranks offered one with the
// same shape, and agrees with the peer (one exchange) that both could. It
// returns the control block fields for the large region (zero: no PCIe
// part). Collective whenever both blobs offer an inbox, which both ranks
// see alike.
func (f *Plane) openPCIe(ctx context.Context, blobs [][]byte, bus []string) (host [gpu.FlagMaxRanks]uint64, err error) {
	le := binary.LittleEndian
	at := flagBlobHead + 2*flagRegionBlob
	field := func(r, i int) uint64 { return le.Uint64(blobs[r][at+8*i:]) }
	offered := f.n == 2
	for r := range blobs {
		offered = offered && field(r, 0) != 0 && field(r, 0) == field(0, 0) && field(r, 1) == field(0, 1) && field(r, 2) == field(0, 2)
	}
	x := f.pcie
	if !offered {
		if x != nil {
			f.c.Log().Info("gpu flag allreduce: NVLink only", "why", "a rank has no pcie inbox or other settings")
			f.pcie = nil
			return host, x.close(false)
		}
		return host, nil
	}
	// Both offered, so both have x.
	ok := []byte{1}
	peer := 1 - f.me
	ref := gpu.SharedHostRef{PID: int(field(peer, 3)), FD: int(field(peer, 4)), Len: int(field(peer, 5)), Ino: field(peer, 6)}
	if ref.Len != x.inbox.Len() {
		ok[0] = 0
	} else if x.peer, err = f.dev.OpenSharedHost(ref); err != nil {
		f.c.Log().Warn("gpu flag allreduce: cannot map the peer's pcie inbox, NVLink only", "peer", peer, "error", err)
		ok[0] = 0
	}
	var mine, theirs uintptr
	if ok[0] == 1 {
		mine, err = x.inbox.DevicePtr()
		if err == nil {
			theirs, err = x.peer.DevicePtr()
		}
		if err != nil {
			f.c.Log().Warn("gpu flag allreduce: pcie inbox not mapped for kernels, NVLink only", "error", err)
			ok[0] = 0
		}
	}
	all := make([]byte, f.n)
	if err := f.c.Engine().AllGather(ctx, collectives.HostBuffer(ok), collectives.HostBuffer(all), 1, dtype.Uint8); err != nil {
		return host, fmt.Errorf("rank %d on %s: agree on the flag allreduce's pcie inboxes: %w", f.me, f.c.Host(), err)
	}
	if all[0] != 1 || all[1] != 1 {
		f.pcie = nil
		return host, x.close(false)
	}
	if err := x.inbox.CloseFD(); err != nil {
		return host, err
	}
	host[f.me], host[peer] = uint64(mine), uint64(theirs)
	if f.me == 0 {
		if err := x.newPlanner(bus[f.me], bus[peer]); err != nil {
			return host, err
		}
	}
	f.c.Log().Info("gpu flag allreduce pcie part", "blocks", x.blocks, "nvlink_blocks", x.nvcap, "slot", x.slot, "inbox", x.inbox.Len())
	return host, nil
}
