package direct

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"flexlink/collectives"
	"flexlink/dtype"
	"flexlink/fabric"
	"flexlink/fabric/balance"
	"flexlink/gpu"
)

// The flag allreduce's PCIe part (gpu/kernels/flag.cu, "PCIe part"): with
// two ranks, calls on the large region add FLEXLINK_GPU_FLAG_PCIE_BLOCKS
// blocks that move the tail of the vector through pinned host memory while
// the other blocks move the head over NVLink, all inside the one kernel.
// Each rank owns an inbox (shared host memory both processes map and
// register); a rank's blocks store into the peer's inbox over PCIe and
// load out of their own. Rank 0's balancer chooses the tail's length per
// call, its kernel tells rank 1's kernel (device memory, no host message),
// and every block reports its time into a host-mapped array from which
// rank 0 feeds the balancer how long each link took for its part (stage 2),
// a few calls later, without waiting for the GPU.

const (
	flagPCIeFields = 7 // blocks, slot bytes, NVLink block cap, then the inbox reference (pid, fd, length, inode)
	flagPCIeBlob   = flagPCIeFields * 8
	flagPCIePend   = 8        // calls whose times rank 0 may still read
	flagPCIeMinPer = 64 << 10 // bytes per PCIe block below which a call keeps NVLink only
)

// Stage-1 priors for the flag kernel's links, from 2×H200: the flag
// allreduce over NVLink alone (357 GB/s at 1 GiB) and SM loads and stores
// through pinned host memory with both GPUs moving both ways at once
// (pcie_sm_probe: 27.5 GB/s per direction with 8 blocks).
const (
	flagNVPriorBW   = 350e9
	flagPCIePriorBW = 27e9
	flagPriorLat    = 10 * time.Microsecond
)

type flagPCIe struct {
	blocks, slot, nvcap int
	inbox, peer         *gpu.SharedHost // this rank's inbox, the peer's as mapped here
	times               *gpu.HostMem    // FlagMaxBlocks+1 words the kernels write (FlagTime; the last: pcount)

	// Rank 0: the balancer and the calls whose times are not read yet.
	planner  *balance.Planner
	key      string
	pend     []flagPCIeCall
	observed int
	logged   map[int]float64
}

type flagPCIeCall struct {
	call          uint64
	grid, nvg     int
	bytes, pbytes int
}

// flagPCIeBlocks reads FLEXLINK_GPU_FLAG_PCIE_BLOCKS: 0 when the PCIe part
// is off for this plane (more than two ranks, FLEXLINK_LINKS without pcie,
// no staging).
func flagPCIeBlocks(p *directPlane) (int, error) {
	n := p.cfg.Flag.PCIeBlocks
	if p.n != 2 || p.px.staging == 0 {
		return 0, nil
	}
	return n, nil
}

// offerFlagPCIe makes this rank's inbox and times array (when the PCIe part
// is on here) and writes its part of the setup blob into b.
func (p *directPlane) offerFlagPCIe(f *flagPlane, b []byte) error {
	large := f.regions[1].layout
	if f.maxBytes < flagSmallMax {
		return nil // no call reaches the large region
	}
	blocks, err := flagPCIeBlocks(p)
	if err != nil || blocks == 0 {
		return err
	}
	nvcap := min(large.MaxBlocks, p.dev.Multiprocessors()-blocks)
	if nvcap < 1 {
		return nil
	}
	x := &flagPCIe{blocks: blocks, slot: large.SlotBytes, nvcap: nvcap, logged: map[int]float64{}}
	ctl := gpu.FlagCtl{Layout: large, HostSlot: x.slot, HostBlocks: blocks}
	if x.inbox, err = p.dev.NewSharedHost(ctl.InboxBytes(p.n)); err != nil {
		p.c.Log().Warn("gpu flag allreduce: no pcie inbox, NVLink only", "error", err)
		return nil
	}
	if x.times, err = p.dev.AllocHost(8 * (gpu.FlagMaxBlocks + 1)); err != nil {
		p.c.Log().Warn("gpu flag allreduce: no times array for the pcie part, NVLink only", "error", err)
		return x.close("")
	}
	clear(x.times.Bytes()) // no call's times yet (pinned allocations are not zeroed)
	f.pcie = x
	ref := x.inbox.Ref()
	for i, v := range []uint64{uint64(blocks), uint64(x.slot), uint64(nvcap), uint64(ref.PID), uint64(ref.FD), uint64(ref.Len), ref.Ino} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return nil
}

// openFlagPCIe maps the peer's inbox when both ranks offered one with the
// same shape, and agrees with the peer (one exchange) that both could. It
// returns the control block fields for the large region (zero: no PCIe
// part). Collective whenever both blobs offer an inbox, which both ranks
// see alike.
func (p *directPlane) openFlagPCIe(ctx context.Context, f *flagPlane, blobs [][]byte, bus []string) (host [gpu.FlagMaxRanks]uint64, err error) {
	le := binary.LittleEndian
	at := flagBlobHead + 2*flagRegionBlob
	field := func(r, i int) uint64 { return le.Uint64(blobs[r][at+8*i:]) }
	offered := p.n == 2
	for r := range blobs {
		offered = offered && field(r, 0) != 0 && field(r, 0) == field(0, 0) && field(r, 1) == field(0, 1) && field(r, 2) == field(0, 2)
	}
	x := f.pcie
	if !offered {
		if x != nil {
			p.c.Log().Info("gpu flag allreduce: NVLink only", "why", "a rank has no pcie inbox or other settings")
			f.pcie = nil
			return host, x.close("")
		}
		return host, nil
	}
	// Both offered, so both have x.
	ok := []byte{1}
	peer := 1 - p.me
	ref := gpu.SharedHostRef{PID: int(field(peer, 3)), FD: int(field(peer, 4)), Len: int(field(peer, 5)), Ino: field(peer, 6)}
	if ref.Len != x.inbox.Len() {
		ok[0] = 0
	} else if x.peer, err = p.dev.OpenSharedHost(ref); err != nil {
		p.c.Log().Warn("gpu flag allreduce: cannot map the peer's pcie inbox, NVLink only", "peer", peer, "error", err)
		ok[0] = 0
	}
	var mine, theirs uintptr
	if ok[0] == 1 {
		mine, err = x.inbox.DevicePtr()
		if err == nil {
			theirs, err = x.peer.DevicePtr()
		}
		if err != nil {
			p.c.Log().Warn("gpu flag allreduce: pcie inbox not mapped for kernels, NVLink only", "error", err)
			ok[0] = 0
		}
	}
	all := make([]byte, p.n)
	if err := p.c.Engine().AllGather(ctx, collectives.HostBuffer(ok), collectives.HostBuffer(all), 1, dtype.Uint8); err != nil {
		return host, fmt.Errorf("rank %d on %s: agree on the flag allreduce's pcie inboxes: %w", p.me, p.c.Host(), err)
	}
	if all[0] != 1 || all[1] != 1 {
		f.pcie = nil
		return host, x.close("")
	}
	if err := x.inbox.CloseFD(); err != nil {
		return host, err
	}
	host[p.me], host[peer] = uint64(mine), uint64(theirs)
	if p.me == 0 {
		if err := p.flagPlanner(x, bus[p.me], bus[peer]); err != nil {
			return host, err
		}
	}
	p.c.Log().Info("gpu flag allreduce pcie part", "blocks", x.blocks, "nvlink_blocks", x.nvcap, "slot", x.slot, "inbox", x.inbox.Len())
	return host, nil
}

// flagPlanner gives rank 0 its balancer: the cached profile of this GPU
// pair when there is one, else the priors.
func (p *directPlane) flagPlanner(x *flagPCIe, mine, theirs string) error {
	specs := []balance.LinkSpec{
		{ID: linkNVLink, Kind: fabric.KindNVLink, Bandwidth: flagNVPriorBW, Latency: flagPriorLat},
		{ID: linkPCIe, Kind: fabric.KindPCIe, Bandwidth: flagPCIePriorBW, Latency: flagPriorLat},
	}
	x.key = fmt.Sprintf("gpu-flag %s %s>%s %d blocks", p.c.Host(), mine, theirs, x.blocks)
	if dir := p.px.cacheDir; dir != "" {
		if st, err := balance.LoadProfile(dir, x.key); err == nil {
			if pl, err := balance.Restore(st, specs); err == nil {
				x.planner = pl
				return nil
			}
		}
	}
	pl, err := balance.NewPlanner(specs, nil, balance.Config{})
	x.planner = pl
	return err
}

// flagPCIeFor is the PCIe part of call number call, of count elements of
// size sz on the large region, and the NVLink blocks' cap. Rank 0 plans it
// (and first feeds the balancer whatever earlier calls' times have come
// in); rank 1 takes rank 0's from its kernel.
func (p *directPlane) flagPCIeFor(x *flagPCIe, call uint64, count, sz int) gpu.FlagPCIe {
	pc := gpu.FlagPCIe{Count: -1, Blocks: x.blocks, Call: call}
	if p.me != 0 {
		return pc
	}
	p.flagObserve(x)
	bytes := count * sz
	f, by := p.px.fixed, "FLEXLINK_PCIE_SHARE"
	if f < 0 {
		f, by = 0, "balancer"
		for _, sh := range x.planner.Shares(bytes) {
			if sh.Link == linkPCIe {
				f = sh.Fraction
			}
		}
	}
	f = math.Min(f, pcieMaxShare)
	unit := 256 / sz // the head stays a whole number of 256-byte chunks
	head := count - int(f*float64(count))
	head = min(count, (head+unit-1)/unit*unit)
	pc.Count = count - head
	if pc.Count*sz < x.blocks*flagPCIeMinPer {
		pc.Count = 0
	}
	p.logFlagShare(x, bytes, float64(pc.Count)/float64(count), by)
	return pc
}

// flagLaunched records a launched call for flagObserve (rank 0).
func (x *flagPCIe) flagLaunched(call uint64, grid, nvg, bytes, pbytes int) {
	if len(x.pend) == flagPCIePend {
		x.pend = x.pend[1:]
	}
	x.pend = append(x.pend, flagPCIeCall{call: call, grid: grid, nvg: nvg, bytes: bytes, pbytes: pbytes})
}

// flagObserve feeds the balancer the newest pending call whose blocks have
// all written their times (the kernels write them as they end; a call
// still running is simply not ready), and forgets it and older ones.
func (p *directPlane) flagObserve(x *flagPCIe) {
	words := x.times.Bytes()
	for k := len(x.pend) - 1; k >= 0; k-- {
		c := x.pend[k]
		var tn, tp int64
		done := true
		for b := 0; b < c.grid && done; b++ {
			call, ns := gpu.FlagTime(binary.LittleEndian.Uint64(words[8*b:]))
			done = call == c.call&(1<<24-1)
			if b < c.nvg {
				tn = max(tn, ns)
			} else {
				tp = max(tp, ns)
			}
		}
		if !done {
			continue
		}
		obs := []balance.Observation{{Link: linkNVLink, Bytes: int64(c.bytes - c.pbytes), Duration: time.Duration(tn)}}
		if c.pbytes > 0 {
			obs = append(obs, balance.Observation{Link: linkPCIe, Bytes: int64(c.pbytes), Duration: time.Duration(tp)})
		}
		x.planner.Observe(c.bytes, obs)
		x.observed++
		p.c.Log().Debug("gpu flag pcie times", "bytes", c.bytes, "pcie_bytes", c.pbytes, "nvlink_us", tn/1000, "pcie_us", tp/1000)
		x.pend = x.pend[k+1:]
		return
	}
}

// lastPCIe is the PCIe part (elements) of the latest call whose kernel has
// started, as it wrote it: on rank 1, which learns the split only so, the
// call before the one being enqueued, as a rule.
func (x *flagPCIe) lastPCIe() int {
	return int(binary.LittleEndian.Uint64(x.times.Bytes()[8*gpu.FlagMaxBlocks:]))
}

func (p *directPlane) logFlagShare(x *flagPCIe, bytes int, share float64, by string) {
	class := 0
	for b := bytes; b > 1; b >>= 1 {
		class++
	}
	if old, ok := x.logged[class]; ok && math.Abs(old-share) < 0.005 {
		return
	}
	x.logged[class] = share
	p.c.Log().Info("gpu flag allreduce share", "bytes", bytes, "nvlink", round3(1-share), "pcie", round3(share), "by", by, "observed", x.observed)
}

// close saves what the balancer learnt (rank 0, into dir when set) and
// frees the inboxes and times (the kernels must be done with them).
func (x *flagPCIe) close(dir string) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if x.planner != nil && x.observed > 0 && dir != "" {
		keep(balance.SaveProfile(dir, x.key, x.planner.State()))
	}
	for _, h := range []*gpu.SharedHost{x.peer, x.inbox} {
		if h != nil {
			keep(h.Close())
		}
	}
	x.peer, x.inbox = nil, nil
	if x.times != nil {
		keep(x.times.Free())
		x.times = nil
	}
	return first
}
