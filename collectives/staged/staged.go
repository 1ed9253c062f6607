package staged

import (
	"context"
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
)

// The staged plane is the generic path for GPUs that cannot reach each
// other directly (ranks on different hosts, no peer access, GPUs hidden by
// CUDA_VISIBLE_DEVICES): copy the device buffers into pinned host memory,
// run the host algorithm (the Comm's collectives.Engine over shm or tcp),
// and copy the result back. It is correct for every collective and every
// topology. Calls larger than two chunks are pipelined (pipeline.go,
// chunks.go): the copy to the host, the host collective (the wire, across
// hosts) and the copy back overlap chunk by chunk. Allreduces, reduces and
// broadcasts are cut into slices of the buffer, allgathers and
// reduce-scatters per rank's block, groups of sends and receives per
// message; all-to-alls run in rounds (alltoall.go). Smaller calls
// synchronize the caller's stream twice, so nothing overlaps and the host
// links set the speed. A network provider that reads device
// memory (GPUDirect RDMA) is what replaces the staging across hosts (see
// docs/NET.md, "GPU buffers across hosts").
type stagedPlane struct {
	c     plane.Host
	dev   *gpu.Device
	host  *gpu.HostMem // staging, grown on demand, reused across calls
	chunk int          // pipeline chunk in bytes (0: no pipelining)
	// wholeReductions keeps allreduces, reduces and reduce-scatters whole
	// (New's default): measured on an H100 across emulated hosts over
	// tcp, a 64 MiB allreduce took 2× as long in 4 MiB chunks (the host
	// allreduce of a chunk is far less efficient than one large call),
	// while allgathers and send/recv gained 1.4–1.6× (docs/PERF.md).
	wholeReductions bool
	piped           [plane.AllToAllv + 1]int // calls pipelined, by kind (tests)
	ho              *handoffState            // the PXN GPU hand-off's memory (handoff.go), once used
}

// New makes the staged plane for h's ranks on dev, pipelining in chunks of
// DefaultChunk. It allocates nothing until the first call.
func New(c plane.Host, dev *gpu.Device) plane.Plane {
	return &stagedPlane{c: c, dev: dev, chunk: DefaultChunk, wholeReductions: true}
}

// NewChunked is New with the pipeline's chunk in bytes (0 turns the
// pipeline off). Every rank of a communicator must use the same chunk.
func NewChunked(c plane.Host, dev *gpu.Device, chunk int) plane.Plane {
	return &stagedPlane{c: c, dev: dev, chunk: chunk}
}

func (p *stagedPlane) close(clean bool) error {
	var err error
	if p.ho != nil {
		err = p.ho.close(clean)
	}
	if p.host == nil {
		return err
	}
	err = errors.Join(err, p.host.Free())
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

func (p *stagedPlane) do(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	if o.Kind == plane.AllToAll || o.Kind == plane.AllToAllv { // through PXN when it applies (alltoall.go)
		return p.alltoall(ctx, o, s)
	}
	if p.pipelined(o) {
		return p.pipeline(ctx, o, s)
	}
	if o.Kind == plane.Group {
		return p.group(ctx, o, s)
	}
	sb, rb := wholeStaging(o)
	mem, err := p.staging(sb + rb)
	if err != nil {
		return err
	}
	hs, hr := collectives.HostBuffer(mem[:sb]), collectives.HostBuffer(mem[sb:])
	if o.Kind == plane.Broadcast && o.Send != nil {
		if err := s.CopyDtoH(hr, o.Send); err != nil {
			return err
		}
	} else if sb > 0 {
		if err := s.CopyDtoH(hs, o.Send); err != nil {
			return err
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return err
	}
	e := p.c.Engine()
	switch o.Kind {
	case plane.AllReduce:
		err = e.AllReduce(ctx, hs, hr, o.Count, o.DT, o.Op)
	case plane.AllGather:
		err = e.AllGather(ctx, hs, hr, o.Count, o.DT)
	case plane.ReduceScatter:
		err = e.ReduceScatter(ctx, hs, hr, o.Count, o.DT, o.Op)
	case plane.Broadcast:
		err = e.Broadcast(ctx, hr, hr, o.Count, o.DT, o.Root)
	case plane.Reduce:
		err = e.Reduce(ctx, hs, hr, o.Count, o.DT, o.Op, o.Root)
	case plane.AllToAll:
		err = e.AllToAll(ctx, hs, hr, o.Count, o.DT)
	default:
		err = fmt.Errorf("gpu: unknown collective %d", o.Kind)
	}
	if err != nil {
		return err
	}
	if o.Recv != nil {
		if err := s.CopyHtoD(o.Recv, hr); err != nil {
			return err
		}
	}
	// The staging memory is reused by the next call, whose stream may be
	// another one: wait for the copy out of it here.
	return syncStream(ctx, s)
}

// group stages every send, runs the host Group, and copies every receive
// back.
func (p *stagedPlane) group(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	total := 0
	for _, e := range o.P2P {
		total += bufLen(e.Buf)
	}
	mem, err := p.staging(total)
	if err != nil {
		return err
	}
	ps := make([]collectives.P2P, len(o.P2P))
	off := 0
	for i, e := range o.P2P {
		hb := mem[off : off+bufLen(e.Buf)]
		off += len(hb)
		ps[i] = collectives.P2P{Send: e.Send, Peer: e.Peer, Buf: collectives.HostBuffer(hb)}
		if e.Send && len(hb) > 0 { // a nil buffer is an empty message
			if err := s.CopyDtoH(hb, e.Buf); err != nil {
				return err
			}
		}
	}
	if err := syncStream(ctx, s); err != nil {
		return err
	}
	if err := p.hostGroup(ctx, ps); err != nil {
		return err
	}
	for i, e := range o.P2P {
		if !e.Send && bufLen(e.Buf) > 0 {
			if err := s.CopyHtoD(e.Buf, ps[i].Buf.(collectives.HostBuffer)); err != nil {
				return err
			}
		}
	}
	return syncStream(ctx, s)
}

// wholeStaging is the staging an unpipelined collective takes: sb bytes
// for the copy of send, rb for recv's.
func wholeStaging(o *plane.Op) (sb, rb int) {
	sb, rb = bufLen(o.Send), bufLen(o.Recv)
	if o.Kind == plane.Broadcast {
		sb = 0 // the host broadcast runs in place in recv's staging
	}
	if o.Kind == plane.Reduce && o.Recv == nil {
		rb = o.Count * o.DT.Size() // non-roots need scratch of the same size
	}
	return sb, rb
}

func bufLen(b *gpu.Buffer) int {
	if b == nil {
		return 0
	}
	return b.Len()
}

// syncStream waits for s without blocking past ctx (gpu.Stream.SynchronizeCtx).
func syncStream(ctx context.Context, s *gpu.Stream) error { return s.SynchronizeCtx(ctx) }

// Do runs one call (plane.Plane).
func (p *stagedPlane) Do(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	return p.do(ctx, o, s)
}

// Quiesce has nothing to wait for: the staged plane runs no kernels that
// peers write into.
func (p *stagedPlane) Quiesce() error { return nil }

// Close frees the staging memory (plane.Plane).
func (p *stagedPlane) Close(clean bool) error { return p.close(clean) }

// AsyncError is always nil: the staged plane fails synchronously.
func (p *stagedPlane) AsyncError() error { return nil }

// LinkShares is empty: the host links carry everything.
func (p *stagedPlane) LinkShares() map[string]float64 { return map[string]float64{} }
