package flagplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// Flag regions on first use. A communicator that never calls a flag
// kernel (a split used for one broadcast, torch's two-rank communicator of
// a pair that never sends) should hold no device memory for them, and a
// job of many communicators should not pay the full regions for each
// (docs/GPU.md, "Device memory"). So a region is made by the first call
// that needs it, under the communicator's queue, on every rank at the same
// call: the flag kernels already rely on every rank deciding alike from
// the call (takes, p2p), and the lazy setup decides from the same inputs.
//
// Making region i (0 small, 1 large) takes two all-gathers over the host
// links, once per region for the communicator's life (or until Release):
//
//  1. the call's signature and this rank's proposal: for the small region
//     "primary" when no other communicator of this process holds its
//     device's primary small region (devmem.go), for the large region
//     "yes" when the limits let calls reach it and no other communicator
//     holds the device's large region (so the first communicator to make
//     a large call gets it, even if a pair's communicator took the small
//     one first). Ranks whose signatures differ fail with ErrMismatch (the
//     host messages' tags catch a rank that runs a handshake instead). The
//     ranks take the proposal only when every rank made it, so one layout
//     holds on every rank.
//  2. when a region is made: whether this rank could allocate and zero
//     it, and its IPC handle. Every rank maps its peers' regions and writes
//     its control block before its kernel is enqueued.
//
// A secondary small region (flagSecondaryBytes, at most
// flagSecondaryBlocks blocks) serves every size when the plane has no
// large region. Nothing is shared between communicators: each region's
// slots and counters belong to one communicator, so two threads running
// collectives on two communicators of one device (a PyTorch pattern) never
// touch each other's slots, in any order.

const (
	// flagSecondaryBytes is the slot space of a secondary communicator's
	// one region: with its counters, about 12 MiB whatever the number of
	// ranks (issue 27: at most 16 MiB per extra communicator). With two
	// ranks and 32 blocks its slots are 192 KiB; the primary's large region
	// has 512 KiB slots (FLEXLINK_GPU_FLAG_REGION_BYTES).
	flagSecondaryBytes = 12 << 20
	// flagSecondaryBlocks caps a secondary communicator's grid: fewer blocks
	// make larger slots of the same memory, and leave SMs to a kernel of
	// another communicator running at the same time.
	flagSecondaryBlocks = 32
)

// largeState says whether a plane's calls of SmallMax bytes and more
// have the large region; it changes only in a region exchange, so every
// rank has the same.
type largeState uint8

const (
	largeUndecided largeState = iota // no call has needed it yet
	largeYes                         // made
	largeNo                          // large calls use the small region
)

// secondaryLayout is the layout of a secondary communicator's region for
// the configured small layout conf (whose blocks it caps), alike on every
// rank whose configured layouts agree.
func secondaryLayout(conf gpu.FlagLayout, n int) gpu.FlagLayout {
	blocks := min(conf.MaxBlocks, flagSecondaryBlocks)
	slot := flagSecondaryBytes / ((n - 1) * blocks * conf.Depth) / 256 * 256
	return gpu.FlagLayout{SlotBytes: max(slot, gpu.FlagSlotHeader+256), Depth: conf.Depth, MaxBlocks: blocks}
}

// regionFor returns the region a call of bytes (signature sig) uses,
// making the small region and, for calls of SmallMax bytes or more,
// the large one first when no call has made them yet. Collective: every
// rank reaches it at the same call.
func (f *Plane) regionFor(ctx context.Context, o *plane.Op, bytes int) (*flagRegion, error) {
	sig := [3]uint64{uint64(o.Kind) | uint64(o.DT)<<8 | uint64(o.Op)<<16, uint64(o.Count), uint64(int64(o.Root))}
	if f.regions[0].mem == nil {
		if err := f.makeRegion(ctx, sig, 0); err != nil {
			return nil, err
		}
	}
	if bytes < SmallMax {
		return &f.regions[0], nil
	}
	if f.large == largeUndecided {
		if err := f.makeRegion(ctx, sig, 1); err != nil {
			return nil, err
		}
	}
	if f.large == largeYes {
		return &f.regions[1], nil
	}
	return &f.regions[0], nil
}

// regionExchange is the first all-gather's record: the call's signature
// (3 words), the region, the proposal.
const regionExchange = 5 * 8

// makeRegion agrees with the peers on region i's layout and makes it
// (see the file's comment).
func (f *Plane) makeRegion(ctx context.Context, sig [3]uint64, i int) error {
	propose := false
	switch {
	case i == 0:
		propose = claimRegion(f.dev, 0)
	case f.lim.maxBytes >= SmallMax:
		propose = claimRegion(f.dev, 1)
	}
	f.claims[i] = propose
	le := binary.LittleEndian
	mine := make([]byte, regionExchange)
	for k, w := range sig {
		le.PutUint64(mine[8*k:], w)
	}
	le.PutUint64(mine[24:], uint64(i))
	if propose {
		le.PutUint64(mine[32:], 1)
	}
	all := make([]byte, f.n*regionExchange)
	// This is where the ranks meet at their first flag call: a peer that
	// does not come within FLEXLINK_GPU_KERNEL_TIMEOUT fails it as a
	// kernel waiting for it would.
	wait, cancel := ctx, context.CancelFunc(func() {})
	if f.timeout > 0 {
		wait, cancel = context.WithTimeout(ctx, f.timeout)
	}
	err := f.c.Engine().AllGather(wait, collectives.HostBuffer(mine), collectives.HostBuffer(all), regionExchange, dtype.Uint8)
	late := wait.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && late:
		return fmt.Errorf("rank %d on %s: a peer did not come to the first flag call within FLEXLINK_GPU_KERNEL_TIMEOUT (%v): %w (%w)",
			f.me, f.c.Host(), f.timeout, errs.ErrTimeout, err)
	case err != nil:
		return fmt.Errorf("rank %d on %s: agree on a flag region: %w", f.me, f.c.Host(), err)
	}
	agreed := true
	for r := range f.n {
		theirs := all[r*regionExchange:]
		for k := range 4 {
			if le.Uint64(theirs[8*k:]) != le.Uint64(mine[8*k:]) {
				return fmt.Errorf("rank %d on %s: flag region setup: rank %d on %s called another collective, or another count, dtype, op or root: %w",
					f.me, f.c.Host(), r, f.c.PeerHost(r), errs.ErrMismatch)
			}
		}
		agreed = agreed && le.Uint64(theirs[32:]) == 1
	}
	if !agreed && f.claims[i] {
		releaseRegion(f.dev, i)
		f.claims[i] = false
	}
	if i == 1 {
		if !agreed {
			f.large = largeNo
			return nil
		}
		f.large = largeYes
	}
	layout := f.conf[i]
	if i == 0 && !agreed {
		layout = secondaryLayout(f.conf[0], f.n)
	}
	err = f.allocRegion(ctx, i, layout, i == 0 && !agreed)
	if err != nil && f.claims[i] {
		releaseRegion(f.dev, i)
		f.claims[i] = false
	}
	return err
}

// allocRegion makes region i with layout l on every rank: allocate and
// zero, exchange the handles (with whether each rank could), map the
// peers', write the control block.
func (f *Plane) allocRegion(ctx context.Context, i int, l gpu.FlagLayout, secondary bool) (err error) {
	size := l.RegionBytes(f.n)
	mem, aerr := f.zeroed(size)
	if aerr != nil {
		aerr = fmt.Errorf("rank %d on %s: gpu flag region of %s: %w", f.me, f.c.Host(), MiB(int64(size)), aerr)
	}
	rec := 1 + gpu.IPCHandleSize
	mine := make([]byte, rec)
	if aerr == nil {
		var h []byte
		if h, aerr = mem.IPCHandle(); aerr == nil {
			mine[0] = 1
			copy(mine[1:], h)
		}
	}
	all := make([]byte, f.n*rec)
	if err := f.c.Engine().AllGather(ctx, collectives.HostBuffer(mine), collectives.HostBuffer(all), rec, dtype.Uint8); err != nil {
		aerr = errors.Join(aerr, fmt.Errorf("rank %d on %s: exchange flag region handles: %w", f.me, f.c.Host(), err))
	}
	g := flagRegion{layout: l, mem: mem, peers: make([]*gpu.Buffer, f.n), secondary: secondary}
	defer func() {
		if err != nil {
			f.dropRegion(&g) // unused by any kernel: safe to free
			if i == 1 {
				f.large = largeNo
			}
		}
	}()
	if aerr != nil {
		return aerr
	}
	for r := range f.n {
		if all[r*rec] != 1 {
			return fmt.Errorf("rank %d on %s could not make its gpu flag region of %s (see its log): %w", r, f.c.PeerHost(r), MiB(int64(size)), errs.ErrAborted)
		}
	}
	ctl := f.ctl
	ctl.Layout = l
	ctl.LLBlocks = f.llBlocks(l)
	if i == 0 {
		ctl.Host, ctl.HostSlot, ctl.HostBlocks, ctl.Times = [gpu.FlagMaxRanks]uint64{}, 0, 0, 0 // the PCIe part is the large region's
	}
	for r := range f.n {
		if r == f.me {
			ctl.Region[r] = uint64(mem.Ptr())
			continue
		}
		h := all[r*rec+1 : (r+1)*rec]
		m, err := f.dev.OpenIPCBuffer(h, size)
		if err != nil {
			return fmt.Errorf("rank %d on %s: map rank %d's flag region (on %s): %w", f.me, f.c.Host(), r, f.c.PeerHost(r), err)
		}
		g.peers[r] = m
		ctl.Region[r] = uint64(m.Ptr())
	}
	if err := f.writeCtl(mem, ctl); err != nil {
		return err
	}
	f.w.mu.Lock()
	fired := f.w.fired
	if !fired {
		f.regions[i] = g
	}
	f.w.mu.Unlock()
	if fired {
		// The job was aborted before the watcher could see this region:
		// no kernel may run on it (the call fails with the job's error).
		if se := f.c.JobErr(); se != nil {
			return se
		}
		return fmt.Errorf("rank %d on %s: flag region made after the job was aborted: %w", f.me, f.c.Host(), errs.ErrAborted)
	}
	f.c.Log().Debug("gpu flag region made", "comm", f.c.Name(), "region", [2]string{"small", "large"}[i], "bytes", size,
		"slot", l.SlotBytes, "blocks", l.MaxBlocks, "secondary", secondary)
	return nil
}

// zeroed allocates n bytes of device memory and zeroes them before
// returning (a peer must never see an old counter).
func (f *Plane) zeroed(n int) (*gpu.Buffer, error) {
	s, err := f.dev.NewStream()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	mem, err := f.dev.Alloc(n)
	if err != nil {
		return nil, err
	}
	if err := s.Memset(mem, 0); err != nil {
		return nil, errors.Join(err, mem.Free())
	}
	if err := s.Synchronize(); err != nil {
		return nil, errors.Join(err, mem.Free())
	}
	return mem, nil
}

// writeCtl writes a region's control block and waits for it.
func (f *Plane) writeCtl(mem *gpu.Buffer, ctl gpu.FlagCtl) error {
	s, err := f.dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	b := ctl.Bytes()
	if err := s.CopyHtoD(mem.Sub(0, len(b)), b); err != nil {
		return err
	}
	return s.Synchronize()
}

// dropRegion unmaps g's peer regions and frees its own (nothing may use
// them any more).
func (f *Plane) dropRegion(g *flagRegion) error {
	var first error
	for _, b := range g.peers {
		if b != nil {
			first = errors.Join(first, b.Free())
		}
	}
	g.peers = nil
	if g.mem != nil {
		first = errors.Join(first, g.mem.Free())
	}
	g.mem = nil
	return first
}

// freeRegions frees both regions (after the closing barrier, or Release's:
// no kernel of any rank writes into them any more) and gives back the
// device's primary claims. A plane that could not agree with its peers
// (leak) keeps its own regions allocated: a peer's kernel may still write.
func (f *Plane) freeRegions() error {
	var first error
	f.w.mu.Lock()
	regions := f.regions
	f.regions = [2]flagRegion{}
	f.w.mu.Unlock()
	for i := range regions {
		g := &regions[i]
		if f.leak {
			g.mem = nil
		}
		// A CUDA graph's kernels still use the regions: the graph frees
		// them (capture.go).
		if !f.holds.keep(func() error { return f.dropRegion(g) }) {
			first = errors.Join(first, f.dropRegion(g))
		}
		if f.claims[i] {
			releaseRegion(f.dev, i)
			f.claims[i] = false
		}
	}
	f.large = largeUndecided
	return first
}

// release frees the regions and the PCIe part (Suspend): the next flag
// call makes the regions again, with every rank, from zeroed counters. The
// PCIe part (off by default) is not made again: calls after a resume run
// on NVLink only. The caller has quiesced and passed a barrier with every
// rank.
func (f *Plane) Release() error {
	if f == nil {
		return nil
	}
	var first error
	if f.pcie != nil {
		first = f.pcie.close(true)
		f.pcie = nil
		f.ctl.Host, f.ctl.HostSlot, f.ctl.HostBlocks, f.ctl.Times = [gpu.FlagMaxRanks]uint64{}, 0, 0, 0
	}
	return errors.Join(first, f.freeRegions())
}

// memory describes what f holds on the device: bytes allocated, and one
// phrase per region.
func (f *Plane) Memory() (held int64, regions []string) {
	if f == nil {
		return 0, []string{"no flag regions (flag kernels off)"}
	}
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	for i, name := range []string{"small", "large"} {
		g := &f.regions[i]
		switch {
		case g.mem != nil:
			held += int64(g.mem.Len())
			kind := ""
			if g.secondary {
				kind = "secondary, "
			}
			regions = append(regions, fmt.Sprintf("%s %s (%s%d KiB slots, %d blocks)", name, MiB(int64(g.mem.Len())), kind, g.layout.SlotBytes>>10, g.layout.MaxBlocks))
		case i == 1 && f.large == largeNo:
			regions = append(regions, "large none (calls use the small region)")
		case i == 1 && f.lim.maxBytes < SmallMax:
		default:
			regions = append(regions, fmt.Sprintf("%s lazy (up to %s on first use)", name, MiB(int64(f.conf[i].RegionBytes(f.n)))))
		}
	}
	return held, regions
}

// MiB formats n bytes for logs: "16 MiB", "12.02 MiB".
func MiB(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
}
