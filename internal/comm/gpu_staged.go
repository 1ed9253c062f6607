package comm

import (
	"context"
	"fmt"
	"time"

	"flexlink/collectives"
	"flexlink/gpu"
	"flexlink/internal/errs"
)

// The staged plane is the generic path for GPUs that cannot reach each
// other directly (ranks on different hosts, no peer access, GPUs hidden by
// CUDA_VISIBLE_DEVICES): copy the device buffers into pinned host memory,
// run the host algorithm (the Comm's collectives.Engine over shm or tcp),
// and copy the result back. It is correct for every collective and every
// topology and deliberately simple: each call synchronizes the caller's
// stream twice, so nothing overlaps and the host links set the speed. A
// network transport that reads device memory (GPUDirect RDMA) is what
// replaces it across hosts.
type stagedPlane struct {
	c    *Comm
	dev  *gpu.Device
	host *gpu.HostMem // staging, grown on demand, reused across calls
}

func newStagedPlane(c *Comm, dev *gpu.Device) *stagedPlane { return &stagedPlane{c: c, dev: dev} }

func (p *stagedPlane) close() error {
	if p.host == nil {
		return nil
	}
	err := p.host.Free()
	p.host = nil
	return err
}

// staging returns n bytes of pinned host memory.
func (p *stagedPlane) staging(n int) ([]byte, error) {
	if p.host == nil || p.host.Len() < n {
		if p.host != nil {
			if err := p.host.Free(); err != nil {
				return nil, err
			}
			p.host = nil
		}
		h, err := p.dev.AllocHost(max(n, 4096))
		if err != nil {
			return nil, err
		}
		p.host = h
	}
	return p.host.Bytes()[:n], nil
}

func (p *stagedPlane) do(ctx context.Context, o *devOp, s *gpu.Stream) error {
	if o.kind == devGroup {
		return p.group(ctx, o, s)
	}
	sb, rb := bufLen(o.send), bufLen(o.recv)
	sz := o.dt.Size()
	if o.kind == devBroadcast {
		sb = 0 // the host broadcast runs in place in recv's staging
	}
	if o.kind == devReduce && o.recv == nil {
		rb = o.count * sz // non-roots need scratch of the same size
	}
	mem, err := p.staging(sb + rb)
	if err != nil {
		return err
	}
	hs, hr := collectives.HostBuffer(mem[:sb]), collectives.HostBuffer(mem[sb:])
	if o.kind == devBroadcast && o.send != nil {
		if err := s.CopyDtoH(hr, o.send); err != nil {
			return err
		}
	} else if sb > 0 {
		if err := s.CopyDtoH(hs, o.send); err != nil {
			return err
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return err
	}
	e := p.c.engine
	switch o.kind {
	case devAllReduce:
		err = e.AllReduce(ctx, hs, hr, o.count, o.dt, o.op)
	case devAllGather:
		err = e.AllGather(ctx, hs, hr, o.count, o.dt)
	case devReduceScatter:
		err = e.ReduceScatter(ctx, hs, hr, o.count, o.dt, o.op)
	case devBroadcast:
		err = e.Broadcast(ctx, hr, hr, o.count, o.dt, o.root)
	case devReduce:
		err = e.Reduce(ctx, hs, hr, o.count, o.dt, o.op, o.root)
	case devAllToAll:
		err = e.AllToAll(ctx, hs, hr, o.count, o.dt)
	default:
		err = fmt.Errorf("gpu: unknown collective %d", o.kind)
	}
	if err != nil {
		return err
	}
	if o.recv != nil {
		if err := s.CopyHtoD(o.recv, hr); err != nil {
			return err
		}
	}
	// The staging memory is reused by the next call, whose stream may be
	// another one: wait for the copy out of it here.
	return syncStream(ctx, s)
}

// group stages every send, runs the host Group, and copies every receive
// back.
func (p *stagedPlane) group(ctx context.Context, o *devOp, s *gpu.Stream) error {
	total := 0
	for _, e := range o.p2p {
		total += e.Buf.Len()
	}
	mem, err := p.staging(total)
	if err != nil {
		return err
	}
	ps := make([]collectives.P2P, len(o.p2p))
	off := 0
	for i, e := range o.p2p {
		hb := mem[off : off+e.Buf.Len()]
		off += e.Buf.Len()
		ps[i] = collectives.P2P{Send: e.Send, Peer: e.Peer, Buf: collectives.HostBuffer(hb)}
		if e.Send {
			if err := s.CopyDtoH(hb, e.Buf); err != nil {
				return err
			}
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return err
	}
	if err := p.c.engine.Group(ctx, ps); err != nil {
		return err
	}
	for i, e := range o.p2p {
		if !e.Send {
			if err := s.CopyHtoD(e.Buf, ps[i].Buf.(collectives.HostBuffer)); err != nil {
				return err
			}
		}
	}
	return syncStream(ctx, s)
}

func bufLen(b *gpu.Buffer) int {
	if b == nil {
		return 0
	}
	return b.Len()
}

// syncStream waits for s without blocking past ctx: it polls (a blocking
// cuStreamSynchronize could not be interrupted if a peer's GPU work never
// arrives), spinning briefly and then backing off to a millisecond.
func syncStream(ctx context.Context, s *gpu.Stream) error {
	pause := time.Microsecond
	for i := 0; ; i++ {
		done, err := s.Done()
		if err != nil || done {
			return err
		}
		if i >= 64 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: stream still busy: %w (%w)", s.Device(), ctx.Err(), errs.ErrTimeout)
			case <-time.After(pause):
			}
			pause = min(2*pause, time.Millisecond)
		}
	}
}
