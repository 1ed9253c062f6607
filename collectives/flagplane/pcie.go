package flagplane

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/balance"
	"github.com/flexlink/flexlink/fabric/pcie"
	"github.com/flexlink/flexlink/gpu"
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

// The links' ids in rank 0's balancer.
const (
	linkNVLink = 0
	linkPCIe   = 1
)

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
	*peers
	blocks, slot, nvcap int
	inbox, peer         *gpu.SharedHost // this rank's inbox, the peer's as mapped here
	times               *gpu.HostMem    // FlagMaxBlocks+1 words the kernels write (FlagTime; the last: pcount)
	bal                 flagBalancer
}

// flagBalancer is rank 0's balancer for the PCIe part and the calls whose
// times are not read yet (flagPCIe's methods use it).
type flagBalancer struct {
	planner  *balance.Planner // nil off rank 0
	key      string
	pend     []flagPCIeCall
	observed int
	logged   map[int]float64
	fixed    float64 // FLEXLINK_PCIE_SHARE; < 0: the balancer decides
	dir      string  // where the profile is cached ("": not)
}

type flagPCIeCall struct {
	call          uint64
	grid, nvg     int
	bytes, pbytes int
}

// newPlanner gives rank 0 its balancer: the cached profile of this GPU
// pair when there is one, else the priors.
func (x *flagPCIe) newPlanner(mine, theirs string) error {
	specs := []balance.LinkSpec{
		{ID: linkNVLink, Kind: fabric.KindNVLink, Bandwidth: flagNVPriorBW, Latency: flagPriorLat},
		{ID: linkPCIe, Kind: fabric.KindPCIe, Bandwidth: flagPCIePriorBW, Latency: flagPriorLat},
	}
	b := &x.bal
	b.key = fmt.Sprintf("gpu-flag %s %s>%s %d blocks", x.c.Host(), mine, theirs, x.blocks)
	if dir := b.dir; dir != "" {
		if st, err := balance.LoadProfile(dir, b.key); err == nil {
			if pl, err := balance.Restore(st, specs); err == nil {
				b.planner = pl
				return nil
			}
		}
	}
	pl, err := balance.NewPlanner(specs, nil, balance.Config{})
	b.planner = pl
	return err
}

// plan is the PCIe part of call number call, of count elements of
// size sz on the large region, and the NVLink blocks' cap. Rank 0 plans it
// (and first feeds the balancer whatever earlier calls' times have come
// in); rank 1 takes rank 0's from its kernel.
func (x *flagPCIe) plan(call uint64, count, sz int) gpu.FlagPCIe {
	pc := gpu.FlagPCIe{Count: -1, Blocks: x.blocks, Call: call}
	if x.me != 0 {
		return pc
	}
	x.observe()
	bytes := count * sz
	f, by := x.bal.fixed, "FLEXLINK_PCIE_SHARE"
	if f < 0 {
		f, by = 0, "balancer"
		for _, sh := range x.bal.planner.Shares(bytes) {
			if sh.Link == linkPCIe {
				f = sh.Fraction
			}
		}
	}
	f = math.Min(f, pcie.MaxShare)
	unit := 256 / sz // the head stays a whole number of 256-byte chunks
	head := count - int(f*float64(count))
	head = min(count, (head+unit-1)/unit*unit)
	pc.Count = count - head
	if pc.Count*sz < x.blocks*flagPCIeMinPer {
		pc.Count = 0
	}
	x.logShare(bytes, float64(pc.Count)/float64(count), by)
	return pc
}

// launched records a launched call for observe (rank 0).
func (x *flagPCIe) launched(call uint64, grid, nvg, bytes, pbytes int) {
	b := &x.bal
	if len(b.pend) == flagPCIePend {
		b.pend = b.pend[1:]
	}
	b.pend = append(b.pend, flagPCIeCall{call: call, grid: grid, nvg: nvg, bytes: bytes, pbytes: pbytes})
}

// observe feeds the balancer the newest pending call whose blocks have
// all written their times (the kernels write them as they end; a call
// still running is simply not ready), and forgets it and older ones.
func (x *flagPCIe) observe() {
	words := x.times.Bytes()
	b := &x.bal
	for k := len(b.pend) - 1; k >= 0; k-- {
		c := b.pend[k]
		var tn, tp int64
		done := true
		for i := 0; i < c.grid && done; i++ {
			call, ns := gpu.FlagTime(binary.LittleEndian.Uint64(words[8*i:]))
			done = call == c.call&(1<<24-1)
			if i < c.nvg {
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
		b.planner.Observe(c.bytes, obs)
		b.observed++
		x.c.Log().Debug("gpu flag pcie times", "bytes", c.bytes, "pcie_bytes", c.pbytes, "nvlink_us", tn/1000, "pcie_us", tp/1000)
		b.pend = b.pend[k+1:]
		return
	}
}

// lastPCIe is the PCIe part (elements) of the latest call whose kernel has
// started, as it wrote it: on rank 1, which learns the split only so, the
// call before the one being enqueued, as a rule.
func (x *flagPCIe) lastPCIe() int {
	return int(binary.LittleEndian.Uint64(x.times.Bytes()[8*gpu.FlagMaxBlocks:]))
}

// logShare logs the split at INFO, once per size class and again whenever
// it moves by half a percent or more.
func (x *flagPCIe) logShare(bytes int, share float64, by string) {
	class := 0
	for b := bytes; b > 1; b >>= 1 {
		class++
	}
	if old, ok := x.bal.logged[class]; ok && math.Abs(old-share) < 0.005 {
		return
	}
	x.bal.logged[class] = share
	x.c.Log().Info("gpu flag allreduce share", "bytes", bytes, "nvlink", round3(1-share), "pcie", round3(share), "by", by, "observed", x.bal.observed)
}

// close saves what the balancer learnt when save is set (rank 0, into the
// cache directory when there is one) and frees the inboxes and times (the
// kernels must be done with them).
func (x *flagPCIe) close(save bool) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if b := &x.bal; save && b.planner != nil && b.observed > 0 && b.dir != "" {
		keep(balance.SaveProfile(b.dir, b.key, b.planner.State()))
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

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
