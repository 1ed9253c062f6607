package rank

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"flexlink/gpu"
	"flexlink/internal/errs"
)

// The flag allreduce (gpu/flag.go, gpu/kernels/flag.cu): on the direct
// plane, allreduces up to FLEXLINK_GPU_FLAG_BYTES run as one kernel per
// rank that pushes its vector into the peers' slots with SM stores and
// synchronises through counters in device memory. There is no host
// handshake, so a call costs one launch: this is the small-message path,
// and with two ranks (where pushing the whole vector moves as many bytes as
// the two-shot algorithm) the large-message one too.
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

const (
	flagDepth      = 2       // slots per sender and block: step i fills slot i+1 while the peer folds slot i
	flagMinChunk   = 8 << 10 // bytes: smallest chunk a block takes (more blocks below that only add waits)
	flagAutoSmall  = 1 << 20 // bytes: FLEXLINK_GPU_FLAG_BYTES=-1 with more than two ranks
	flagBlobFields = 4       // enabled, slot bytes, depth, max blocks
	flagBlobBytes  = flagBlobFields*8 + gpu.IPCHandleSize
)

type flagPlane struct {
	layout   gpu.FlagLayout
	maxBytes int // largest allreduce taken (bytes)
	region   *gpu.Buffer
	peers    []*gpu.Buffer // peers' regions mapped here (nil for me)
	errMem   *gpu.HostMem  // word 0: the kernels' error word
	last     *gpu.Event    // after the latest flag kernel
	lastS    *gpu.Stream   // the stream it was recorded on
	calls    uint64
}

// flagSettings reads the flag plane's settings; nil when it is off.
func flagSettings(p *directPlane) (*flagPlane, error) {
	env := p.c.world.env
	maxBytes, err := env.Int("FLEXLINK_GPU_FLAG_BYTES")
	if err != nil {
		return nil, err
	}
	if maxBytes == -1 {
		maxBytes = flagAutoSmall
		if p.n == 2 {
			maxBytes = 1 << 62
		}
	}
	if maxBytes < -1 {
		return nil, fmt.Errorf("FLEXLINK_GPU_FLAG_BYTES=%d: want -1 (auto), 0 (off) or a byte count", maxBytes)
	}
	if maxBytes == 0 || p.n < 2 || p.n > gpu.FlagMaxRanks {
		return nil, nil
	}
	blocks, err := env.Int("FLEXLINK_GPU_FLAG_BLOCKS")
	if err != nil {
		return nil, err
	}
	budget, err := env.Int("FLEXLINK_GPU_FLAG_REGION_BYTES")
	if err != nil {
		return nil, err
	}
	slot := budget / (p.n * max(blocks, 1) * flagDepth) / 256 * 256
	l := gpu.FlagLayout{SlotBytes: slot, Depth: flagDepth, MaxBlocks: blocks}
	if err := l.Check(); err != nil {
		return nil, fmt.Errorf("FLEXLINK_GPU_FLAG_BLOCKS=%d, FLEXLINK_GPU_FLAG_REGION_BYTES=%d: %w", blocks, budget, err)
	}
	return &flagPlane{layout: l, maxBytes: maxBytes}, nil
}

// setupFlag allocates and zeroes this rank's region and error word and
// writes its part of the setup exchange into b.
func (p *directPlane) setupFlag(b []byte) error {
	f, err := flagSettings(p)
	if err != nil || f == nil {
		return err
	}
	p.flag = f
	if f.region, err = p.dev.Alloc(f.layout.RegionBytes(p.n)); err != nil {
		return fmt.Errorf("gpu flag region: %w", err)
	}
	if f.errMem, err = p.dev.AllocHost(8); err != nil {
		return fmt.Errorf("gpu flag error word: %w", err)
	}
	atomic.StoreUint64(f.errMem.Word(0), 0)
	if f.last, err = p.dev.NewEvent(false); err != nil {
		return err
	}
	s, err := p.dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	if err = s.Memset(f.region, 0); err == nil {
		err = s.Synchronize() // zero before any peer learns where it is
	}
	if err != nil {
		return err
	}
	h, err := f.region.IPCHandle()
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	for i, v := range []uint64{1, uint64(f.layout.SlotBytes), uint64(f.layout.Depth), uint64(f.layout.MaxBlocks)} {
		le.PutUint64(b[8*i:], v)
	}
	copy(b[flagBlobFields*8:], h)
	return nil
}

// openFlag maps the peers' regions (blobs[r] is rank r's flag part) and
// writes this rank's control block. Every rank sees the same blobs, so
// all keep the flag plane or all drop it.
func (p *directPlane) openFlag(blobs [][]byte) error {
	f := p.flag
	if f == nil {
		return nil
	}
	le := binary.LittleEndian
	for r, b := range blobs {
		l := gpu.FlagLayout{SlotBytes: int(le.Uint64(b[8:])), Depth: int(le.Uint64(b[16:])), MaxBlocks: int(le.Uint64(b[24:]))}
		if le.Uint64(b) != 1 || l != f.layout {
			p.c.world.log.Info("gpu flag allreduce off", "why", fmt.Sprintf("rank %d on %s has it off or a different layout (%+v)", r, p.c.PeerHost(r), l))
			p.flag = nil
			return f.close()
		}
	}
	ptr, err := f.errMem.DevicePtr()
	if err != nil {
		return err
	}
	ctl := gpu.FlagCtl{ErrHost: uint64(ptr), Layout: f.layout, Ranks: p.n, Me: p.me}
	d, err := p.c.world.env.Duration("FLEXLINK_GPU_KERNEL_TIMEOUT")
	if err != nil {
		return err
	}
	ctl.TimeoutNs = uint64(d.Nanoseconds())
	f.peers = make([]*gpu.Buffer, p.n)
	for r, b := range blobs {
		if r == p.me {
			ctl.Region[r] = uint64(f.region.Ptr())
			continue
		}
		m, err := p.dev.OpenIPCBuffer(b[flagBlobFields*8:flagBlobBytes], f.layout.RegionBytes(p.n))
		if err != nil {
			return fmt.Errorf("map rank %d's flag region (on %s): %w", r, p.c.PeerHost(r), err)
		}
		f.peers[r] = m
		ctl.Region[r] = uint64(m.Ptr())
	}
	s, err := p.dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.CopyHtoD(f.region.Sub(0, len(ctl.Bytes())), ctl.Bytes()); err != nil {
		return err
	}
	return s.Synchronize()
}

// takes reports whether o runs on the flag plane.
func (f *flagPlane) takes(o *devOp) bool {
	b := o.count * o.dt.Size()
	return f != nil && o.kind == devAllReduce && b > 0 && b <= f.maxBytes
}

// shape is the grid and chunk (elements) of a call of bytes: blocks of at
// least flagMinChunk, at most the layout's, chunks at most a slot. Every
// rank computes the same from the same call.
func (f *flagPlane) shape(bytes, sz int) (grid, chunk int) {
	grid = min(f.layout.MaxBlocks, max(1, (bytes+flagMinChunk-1)/flagMinChunk))
	cb := (bytes + grid - 1) / grid
	cb = min(f.layout.SlotBytes-gpu.FlagSlotHeader, (cb+255)/256*256)
	return min(grid, (bytes+cb-1)/cb), cb / sz // rounding up may leave blocks without a chunk
}

// asyncError reports a failure a flag kernel recorded, if any.
func (p *directPlane) flagError() error {
	f := p.flag
	if f == nil {
		return nil
	}
	e, bad := gpu.DecodeFlagError(atomic.LoadUint64(f.errMem.Word(0)))
	if !bad {
		return nil
	}
	if e.What == 3 {
		return fmt.Errorf("gpu allreduce (flag kernel, block %d): rank %d on %s called an allreduce of another count, dtype or op: %w",
			e.Block, e.Peer, p.c.PeerHost(e.Peer), errs.ErrMismatch)
	}
	what := "room in its slots"
	if e.What == 2 {
		what = "its data"
	}
	return fmt.Errorf("gpu allreduce (flag kernel, block %d) waited longer than FLEXLINK_GPU_KERNEL_TIMEOUT for %s from rank %d on %s over nvlink: the peer is gone, stalled, or called a different collective: %w",
		e.Block, what, e.Peer, p.c.PeerHost(e.Peer), errs.ErrTimeout)
}

// flagAllReduce enqueues o as one flag kernel.
func (p *directPlane) flagAllReduce(o *devOp, s *gpu.Stream) error {
	f := p.flag
	if err := p.flagError(); err != nil {
		return err
	}
	if f.lastS != nil && f.lastS != s {
		if err := s.Wait(f.last); err != nil {
			return err
		}
	}
	grid, chunk := f.shape(o.count*o.dt.Size(), o.dt.Size())
	if err := s.FlagAllReduce(o.recv, o.send, o.count, o.dt, o.op, f.region, chunk, grid, p.n); err != nil {
		return err
	}
	if err := s.Record(f.last); err != nil {
		return err
	}
	f.lastS = s
	f.calls++
	p.px.mu.Lock()
	p.px.last = [2]int64{int64(o.count * o.dt.Size()), 0}
	p.px.mu.Unlock()
	return nil
}

// quiesce waits for this rank's last flag kernel: after every rank has
// (a barrier), no kernel writes into a region any more and they may go.
func (f *flagPlane) quiesce() error {
	if f == nil || f.lastS == nil {
		return nil
	}
	return f.last.Synchronize()
}

func (f *flagPlane) close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, b := range f.peers {
		if b != nil {
			keep(b.Free())
		}
	}
	f.peers = nil
	if f.region != nil {
		keep(f.region.Free())
		f.region = nil
	}
	if f.errMem != nil {
		keep(f.errMem.Free())
		f.errMem = nil
	}
	if f.last != nil {
		keep(f.last.Close())
		f.last = nil
	}
	return first
}
