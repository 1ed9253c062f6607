package direct

import (
	"context"
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/flagplane"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
)

// New makes the direct plane on every rank of h, once they have agreed to
// use it (each rank's Blocker said ""). bus[r] is rank r's GPU PCI bus id.
// It runs one all-gather over the host links: every rank's IPC event
// handles (events.go), its flag plane's settings (collectives/flagplane)
// and each staged share's part (fabric/linkshare: the PCIe staging
// buffers' references, the net share's listen handles); then each rank
// opens its peers'. It is collective and runs under the communicator's
// queue.
func New(ctx context.Context, h plane.Host, dev *gpu.Device, cfg Config, bus []string) (plane.Plane, error) {
	// Ranks sharing a GPU (see sharedMode): the flag kernels wait inside
	// the GPU for their peers' kernels, which without MPS costs the other
	// process's time slice per call (about 2 ms, measured on one H100 and
	// one H200), so there they serve only calls captured in a CUDA graph
	// (capture.go), where nothing else can run: slow, but right. The PCIe
	// part has no second GPU to reach.
	r1, r2, shares := SharedGPU(bus)
	if shares {
		cfg.Flag.PCIeBlocks = 0
	}
	cfg.Flag.PerGPU = ranksPerGPU(bus)
	dp, err := newDirectPlane(h, dev, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Shared != "events" && allOnOneGPU(bus) {
		// Made before the exchange, dropped after it when every rank runs
		// under MPS and the mode is auto.
		if dp.shared, err = newSharedState(dp.peers, dp.ipc); err != nil {
			dp.close()
			return nil, err
		}
	}
	n := h.Size()
	evBytes := eventBlobBytes(n)
	at := 1 + evBytes + flagplane.BlobBytes // the shares' parts
	// The first byte marks a rank that reached this point (openPeers
	// reads each rank's record after it).
	blob := make([]byte, at+dp.sh.blobBytes())
	blob[0] = 1
	if dev.MPS() {
		blob[0] |= blobMPS
	}
	err = dp.ev.putHandles(blob[1:])
	if err == nil {
		err = dp.sh.offer(ctx, blob[at:])
	}
	if err == nil {
		dp.flag, err = flagplane.New(h, dev, cfg.Flag, shares, dp.stats.set) // captures only until sharedMode has every rank's MPS bit
	}
	if err == nil && dp.flag != nil {
		err = dp.flag.Setup(blob[1+evBytes:at], dp.set.PCIe, cfg.Flag.PCIeBlocks)
	}
	if err != nil {
		dp.close()
		return nil, err
	}
	all := make([]byte, n*len(blob))
	if err := h.Engine().AllGather(ctx, collectives.HostBuffer(blob), collectives.HostBuffer(all), len(blob), dtype.Uint8); err != nil {
		dp.close()
		return nil, fmt.Errorf("exchange gpu event handles: %w", err)
	}
	mps := true // every rank's GPU is shared through MPS
	for r := 0; r < n; r++ {
		mps = mps && all[r*len(blob)]&blobMPS != 0
	}
	if shares {
		dp.sharedMode(cfg.Shared, mps, bus, r1, r2)
	}
	flag, links := make([][]byte, n), make([][]byte, n)
	for r := range flag {
		rec := all[r*len(blob) : (r+1)*len(blob)]
		flag[r], links[r] = rec[1+evBytes:at], rec[at:]
	}
	err = dp.ev.openPeers(all, len(blob))
	if err == nil {
		err = dp.openShares(ctx, links, bus)
	}
	if err == nil && dp.flag != nil {
		var off bool
		if off, err = dp.flag.Open(ctx, flag, bus, cfg.Flag.KernelTimeout); off {
			dp.flag = nil
		}
	}
	if err == nil && dp.shared != nil {
		err = dp.shared.share(ctx, h.Engine()) // shared.go
	}
	if err != nil {
		dp.close()
		return nil, err
	}
	return dp, nil
}

// blobMPS marks, in the first byte of a rank's setup record, a rank whose
// GPU reports MPS (gpu.Device.MPS).
const blobMPS = 2

// sharedMode settles the paths of ranks that share a GPU (r1 and r2 the
// first two), alike on every rank: each sees every rank's MPS bit.
//
//   - Without MPS the GPU time-slices between the ranks' contexts: the
//     flag kernels serve captured calls only, and eager calls take the
//     leader path when every rank is on the one GPU (mode auto or leader)
//     or the event protocol (mode events, or ranks on several GPUs).
//   - Under MPS (every rank's GPU says so) the ranks' kernels run at once:
//     the flag kernels serve eager calls too, as on separate GPUs, and with
//     mode auto the leader path gives way to them (measured on one H200
//     under MPS, 2 ranks: a replayed allreduce 8-10 us, against 2.25 ms
//     without MPS).
func (p *directPlane) sharedMode(mode string, mps bool, bus []string, r1, r2 int) {
	if mps && mode == "auto" && p.shared != nil {
		p.shared.close()
		p.shared = nil
	}
	lg := p.c.Log()
	if p.flag != nil {
		p.flag.SetCaptureOnly(!mps)
		if !mps {
			lg.Info("gpu flag kernels for CUDA graph captures only: ranks share a GPU without MPS", "ranks", fmt.Sprintf("%d,%d", r1, r2), "gpu", bus[r1])
		}
	}
	if p.shared != nil {
		lg.Info("gpu collectives on a shared gpu: rank 0 runs each call for every rank", "FLEXLINK_GPU_SHARED", mode, "mps", mps, "gpu", bus[0])
	} else if mps {
		lg.Info("gpu collectives on a gpu shared through MPS: flag kernels and the event protocol, as on separate GPUs", "gpu", bus[r1])
	}
}

// directBlocker says why this rank cannot use the direct plane with every
// peer, or "" when it can.
func Blocker(c plane.Host, dev *gpu.Device, bus []string) string {
	drv := dev.Driver()
	fake := drv.Library() == "fake"
	for r := 0; r < c.Size(); r++ {
		if r == c.Rank() {
			continue
		}
		if c.PeerHost(r) != c.Host() {
			return fmt.Sprintf("rank %d is on %s, not %s", r, c.PeerHost(r), c.Host())
		}
		// The driver refuses IPC handles inside the process that made them;
		// the fake driver (tests, ranks as goroutines) allows it.
		if !fake && c.SameProcess(r) {
			return fmt.Sprintf("rank %d is in this process (CUDA IPC needs separate processes)", r)
		}
		ord := -1
		for i := 0; i < drv.DeviceCount(); i++ {
			if id, err := drv.PCIBusID(i); err == nil && strings.EqualFold(id, bus[r]) {
				ord = i
			}
		}
		if ord < 0 {
			return fmt.Sprintf("rank %d's gpu %s is not visible here (CUDA_VISIBLE_DEVICES?)", r, bus[r])
		}
		if ord == dev.Ordinal() {
			continue // two ranks on one GPU: IPC works, no peer access needed
		}
		if ok, err := drv.CanAccessPeer(dev.Ordinal(), ord); err != nil || !ok {
			return fmt.Sprintf("%s cannot access rank %d's gpu %s (no peer access: %v)", dev, r, bus[r], err)
		}
	}
	return ""
}

// ranksPerGPU is the most ranks that share one GPU (same PCI bus id).
func ranksPerGPU(bus []string) int {
	per := map[string]int{}
	most := 0
	for _, b := range bus {
		k := strings.ToLower(b)
		per[k]++
		most = max(most, per[k])
	}
	return most
}

// SharedGPU reports two ranks whose GPUs have the same PCI bus id (several
// ranks on one GPU), the first such pair in rank order.
func SharedGPU(bus []string) (r1, r2 int, ok bool) {
	first := map[string]int{}
	for r, b := range bus {
		key := strings.ToLower(b)
		if j, seen := first[key]; seen {
			return j, r, true
		}
		first[key] = r
	}
	return 0, 0, false
}
