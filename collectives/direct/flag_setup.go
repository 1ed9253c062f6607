package direct

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"flexlink/gpu"
)

// Setting up the flag plane (gpu_flag.go): its settings, this rank's
// regions and error word, and the setup exchange that maps the peers'
// regions and writes the control blocks.

// flagSettings reads the flag plane's settings; nil when it is off.
func flagSettings(p *directPlane) (*flagPlane, error) {
	// -1 is each limit's automatic value; 0 turns the flag allreduce (and
	// with it the plane) or the other collectives' kernels off.
	var maxBytes, coll, oneShot int
	for _, l := range []struct {
		v    int
		to   *int
		auto int
	}{
		{p.cfg.Flag.Bytes, &maxBytes, 1 << 62}, // every size: one-shot with 2 ranks, two-shot beyond FLEXLINK_GPU_FLAG_ONESHOT_BYTES with more
		{p.cfg.Flag.CollBytes, &coll, flagAutoColl},
		{p.cfg.Flag.OneShotBytes, &oneShot, flagAutoOneShot},
	} {
		*l.to = l.v
		if l.v == -1 {
			*l.to = l.auto
		}
	}
	if p.n == 2 {
		oneShot = flagAutoOneShot // unused with two ranks: ranks that set it differently still agree
	}
	if maxBytes == 0 || p.n < 2 || p.n > gpu.FlagMaxRanks {
		return nil, nil
	}
	blocks, budget := p.cfg.Flag.Blocks, p.cfg.Flag.RegionBytes
	// Blocks wait for their peers' blocks: never more than the GPU runs at
	// once (one per SM is always resident). Ranks on different GPUs that
	// end up with different layouts turn the flag plane off (openFlag).
	blocks = min(blocks, max(1, p.dev.Multiprocessors()))
	f := &flagPlane{maxBytes: maxBytes, collBytes: coll, oneShot: oneShot}
	// The small region: a quarter of the budget spread as if over n
	// senders (64 KiB slots with two ranks and 128 blocks: small calls want
	// their slots close together, docs/PERF.md); the large region: the whole
	// budget over the n-1 peers' slots (512 KiB).
	for i, b := range []int{budget / 4 * (p.n - 1) / p.n, budget} {
		slot := b / ((p.n - 1) * max(blocks, 1) * flagDepth) / 256 * 256
		l := gpu.FlagLayout{SlotBytes: slot, Depth: flagDepth, MaxBlocks: blocks}
		if err := l.Check(); err != nil {
			return nil, fmt.Errorf("FLEXLINK_GPU_FLAG_BLOCKS=%d, FLEXLINK_GPU_FLAG_REGION_BYTES=%d: %w", blocks, budget, err)
		}
		f.regions[i].layout = l
	}
	return f, nil
}

// setupFlag allocates and zeroes this rank's regions and error word and
// writes its part of the setup exchange into b.
func (p *directPlane) setupFlag(b []byte) error {
	f, err := flagSettings(p)
	if err != nil || f == nil {
		return err
	}
	p.flag = f
	if f.errMem, err = p.dev.AllocHost(16); err != nil {
		return fmt.Errorf("gpu flag error word: %w", err)
	}
	atomic.StoreUint64(f.errMem.Word(0), 0)
	atomic.StoreUint64(f.errMem.Word(1), 1)
	if f.last, err = p.dev.NewEvent(false); err != nil {
		return err
	}
	if f.abortS, err = p.dev.NewStream(); err != nil {
		return err
	}
	s, err := p.dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	le := binary.LittleEndian
	le.PutUint64(b, 1)
	le.PutUint64(b[8:], uint64(f.maxBytes))
	le.PutUint64(b[16:], uint64(f.collBytes))
	le.PutUint64(b[24:], uint64(f.oneShot))
	for i := range f.regions {
		g := &f.regions[i]
		w := b[flagBlobHead+i*flagRegionBlob:]
		for k, v := range []uint64{uint64(g.layout.SlotBytes), uint64(g.layout.Depth), uint64(g.layout.MaxBlocks)} {
			le.PutUint64(w[8*k:], v)
		}
		if i == 1 && f.maxBytes < flagSmallMax {
			continue // every call it takes fits the small region (all ranks agree: maxBytes is in the blob)
		}
		if g.mem, err = p.dev.Alloc(g.layout.RegionBytes(p.n)); err != nil {
			return fmt.Errorf("gpu flag region: %w", err)
		}
		if err = s.Memset(g.mem, 0); err != nil {
			return err
		}
		h, err := g.mem.IPCHandle()
		if err != nil {
			return err
		}
		copy(w[flagBlobFields*8:], h)
	}
	f.cacheDir = p.px.cacheDir
	if err := p.offerFlagPCIe(f, b[flagBlobHead+2*flagRegionBlob:]); err != nil {
		return err
	}
	return s.Synchronize() // zero before any peer learns where the regions are
}

// openFlag maps the peers' regions (blobs[r] is rank r's flag part) and
// writes this rank's control blocks. Every rank sees the same blobs, so
// all keep the flag plane or all drop it.
func (p *directPlane) openFlag(ctx context.Context, blobs [][]byte, bus []string) error {
	f := p.flag
	if f == nil {
		return nil
	}
	le := binary.LittleEndian
	for r, b := range blobs {
		ok := le.Uint64(b) == 1 && le.Uint64(b[8:]) == uint64(f.maxBytes) && le.Uint64(b[16:]) == uint64(f.collBytes) &&
			le.Uint64(b[24:]) == uint64(f.oneShot)
		for i := range f.regions {
			w := b[flagBlobHead+i*flagRegionBlob:]
			l := gpu.FlagLayout{SlotBytes: int(le.Uint64(w)), Depth: int(le.Uint64(w[8:])), MaxBlocks: int(le.Uint64(w[16:]))}
			ok = ok && l == f.regions[i].layout
		}
		if !ok {
			p.c.Log().Info("gpu flag allreduce off", "why", fmt.Sprintf("rank %d on %s has it off or other settings", r, p.c.PeerHost(r)))
			p.flag = nil
			return f.close()
		}
	}
	host, err := p.openFlagPCIe(ctx, f, blobs, bus) // collective: before any local step that may fail
	if err != nil {
		return err
	}
	ptr, err := f.errMem.DevicePtr()
	if err != nil {
		return err
	}
	d := p.cfg.Flag.KernelTimeout
	s, err := p.dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	timeout := uint64(d.Nanoseconds())
	if d <= 0 {
		timeout = 1 << 62 // no deadline: a lost peer still ends the kernels through the abort watcher
	}
	for i := range f.regions {
		g := &f.regions[i]
		if g.mem == nil {
			continue
		}
		ctl := gpu.FlagCtl{ErrHost: uint64(ptr), TimeoutNs: timeout, Layout: g.layout, Ranks: p.n, Me: p.me}
		if x := f.pcie; x != nil && i == 1 {
			times, err := x.times.DevicePtr()
			if err != nil {
				return err
			}
			ctl.Host, ctl.HostSlot, ctl.HostBlocks, ctl.Times = host, x.slot, x.blocks, uint64(times)
		}
		g.peers = make([]*gpu.Buffer, p.n)
		for r, b := range blobs {
			if r == p.me {
				ctl.Region[r] = uint64(g.mem.Ptr())
				continue
			}
			at := flagBlobHead + i*flagRegionBlob + flagBlobFields*8
			m, err := p.dev.OpenIPCBuffer(b[at:at+gpu.IPCHandleSize], g.layout.RegionBytes(p.n))
			if err != nil {
				return fmt.Errorf("map rank %d's flag region (on %s): %w", r, p.c.PeerHost(r), err)
			}
			g.peers[r] = m
			ctl.Region[r] = uint64(m.Ptr())
		}
		if err := s.CopyHtoD(g.mem.Sub(0, len(ctl.Bytes())), ctl.Bytes()); err != nil {
			return err
		}
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	f.stop, f.exited = make(chan struct{}), make(chan struct{})
	go f.watch(p.c.JobDone(), f.stop, func() {
		// A kernel of this rank failed (timeout, mismatch): abort the job
		// now, so the peers' kernels end too, rather than at this rank's
		// next call.
		if err := p.flagWordError(atomic.LoadUint64(f.errMem.Word(0))); err != nil {
			p.c.AbortJob(fmt.Errorf("rank %d on %s: %w", p.c.WorldRank(), p.c.Host(), err))
		}
	})
	return nil
}
