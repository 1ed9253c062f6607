package plane

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// DeviceComm runs a communicator's collectives on GPU buffers with NCCL's
// stream semantics: a call returns once the work is enqueued on the
// caller's stream s; the work starts after the work enqueued on s before
// the call, and work enqueued on s afterwards waits for it (including the
// peers' reads of this rank's send buffer and writes into its recv buffer).
// The host blocks only for small handshakes with the peers, never for the
// data.
//
// Get one with Comm.Device; every rank of the communicator calls it. Calls
// go through the Comm's queue (one collective at a time, in call order), and
// a failure aborts the job like a host collective.
//
// Two data planes sit behind it (Path says which one the ranks agreed on):
//   - direct: every rank on one host, every pair of GPUs with peer access.
//     Ranks map each other's user buffers through CUDA IPC (once per
//     allocation, then cached) and move data with SM kernels (stores into
//     and loads from the peers' memory), copy engines and reduction
//     kernels; the allreduce runs as one flag kernel per rank without host
//     messages (gpu_flag.go); large pushes give a share, chosen by a
//     balancer, to PCIe through shared pinned host memory (LinkShares
//     reports it). See gpu_direct.go, gpu_flag.go, gpu_pcie.go.
//   - staged: anything else. Buffers are copied through pinned host memory
//     and the host algorithms run on the copies. Correct, not fast; see
//     gpu_staged.go.
//
// Counts follow NCCL: AllGather's count is per rank (recv holds Size()
// blocks), ReduceScatter's is the recv count (send holds Size() blocks),
// AllToAll's is per peer (send and recv hold Size() blocks).
//
// Buffers must be device memory of the DeviceComm's GPU, made by
// gpu.Device.Alloc (the direct plane exports whole allocations); sub-ranges
// are fine. The direct plane keeps the peers' mappings of an allocation
// until Close, so free user buffers only after closing the DeviceComm.
type DeviceComm struct {
	c     Caller
	dev   *gpu.Device
	path  string
	plane Plane
	log   callLog // per-call lines (calllog.go)
}

// NewDeviceComm wraps the plane the ranks agreed on (path names it:
// "direct" or "staged") for dev. internal/comm/device makes the choice.
func NewDeviceComm(c Caller, dev *gpu.Device, path string, p Plane) *DeviceComm {
	return &DeviceComm{c: c, dev: dev, path: path, plane: p, log: newCallLog(c.Log())}
}

// SendTo and RecvFrom make the entries of DeviceComm.Group.
func SendTo(peer int, b *gpu.Buffer) P2P { return P2P{Send: true, Peer: peer, Buf: b} }

func RecvFrom(peer int, b *gpu.Buffer) P2P { return P2P{Peer: peer, Buf: b} }

// Caller is what a DeviceComm needs from its communicator: what a plane
// needs (Host), the call queue, and argument checks. comm.Comm implements
// it.
type Caller interface {
	Host
	// Run executes one call under the communicator's queue, with its
	// default deadline and abort handling.
	Run(ctx context.Context, what string, f func(ctx context.Context) error) error
	CheckRoot(root int) error
	CheckPeer(peer int) error
}

// Path is the data plane the ranks agreed on: "direct" or "staged".
func (d *DeviceComm) Path() string { return d.path }

// Comm is the host communicator the DeviceComm belongs to.
func (d *DeviceComm) Comm() Caller { return d.c }

// GPU is the device whose buffers the DeviceComm moves.
func (d *DeviceComm) GPU() *gpu.Device { return d.dev }

// LinkShares reports how the last call's pushes from this rank to its
// peers were divided among link kinds: "nvlink" (SM kernels or copy
// engines) and "pcie"
// (staged through host memory) as fractions of the bytes pushed, summing
// to 1. It is empty after a call that pushed nothing (reductions that only
// read; broadcast and send/recv on the handshake paths, where receivers
// pull; on the flag kernels a broadcast's non-roots, a receive and a
// reduce's root, which send headers only; a zero count) and on the staged
// plane. Safe to call from any goroutine.
func (d *DeviceComm) LinkShares() map[string]float64 {
	return d.plane.LinkShares()
}

// Close releases the mappings, events and streams. It is collective (the
// ranks pass a barrier first, so none is still mid-call), and the streams
// passed to earlier calls must have been synchronized, as before freeing
// memory they use.
func (d *DeviceComm) Close(ctx context.Context) error {
	// The peers' kernels write into this rank's memory until they end:
	// every rank waits for its own before the barrier.
	qerr := d.plane.Quiesce()
	if qerr != nil {
		qerr = fmt.Errorf("rank %d: gpu close: %w", d.c.Rank(), qerr)
	}
	err := d.c.Run(ctx, "gpu close", d.c.Engine().Barrier)
	// Without the barrier a peer's kernel may still be writing into this
	// rank's memory: the plane leaks it (the process is usually about to
	// exit after a failure) rather than free memory that is being written.
	if cerr := d.plane.Close(err == nil && qerr == nil); err == nil {
		err = cerr
	}
	if qerr != nil {
		return qerr
	}
	return err
}

// AsyncError reports a failure that work already enqueued has met inside
// the GPU, as ncclCommGetAsyncError does: a flag kernel (the small and
// two-rank allreduce) that waited longer than FLEXLINK_GPU_KERNEL_TIMEOUT
// for a peer, found that the peer called another allreduce, or was ended
// early because the job was aborted (a peer lost or failed). The error
// names the peer and its host; once it is set, every later call on the
// communicator fails. Call it after synchronising the stream when a
// collective's result matters and no later call follows.
func (d *DeviceComm) AsyncError() error {
	if err := d.plane.AsyncError(); err != nil {
		return fmt.Errorf("rank %d on %s: %w", d.c.WorldRank(), d.c.Host(), err)
	}
	return nil
}

// AllReduce combines send (count elements) across ranks with op into every
// rank's recv. send may equal recv.
func (d *DeviceComm) AllReduce(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, s *gpu.Stream) error {
	return d.call(ctx, s, &Op{Kind: AllReduce, Send: send, Recv: recv, Count: count, DT: dt, Op: op}, count, count)
}

// AllGather concatenates every rank's send (count elements) in rank order
// into recv (Size()*count elements). send may be block Rank() of recv.
func (d *DeviceComm) AllGather(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, s *gpu.Stream) error {
	return d.call(ctx, s, &Op{Kind: AllGather, Send: send, Recv: recv, Count: count, DT: dt}, count, count*d.c.Size())
}

// ReduceScatter reduces send (Size()*count elements) across ranks and leaves
// block Rank() (count elements) in recv. recv may be block Rank() of send.
func (d *DeviceComm) ReduceScatter(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, s *gpu.Stream) error {
	return d.call(ctx, s, &Op{Kind: ReduceScatter, Send: send, Recv: recv, Count: count, DT: dt, Op: op}, count*d.c.Size(), count)
}

// Broadcast copies root's send (count elements) into every rank's recv.
// send is only read on root (nil elsewhere is fine).
func (d *DeviceComm) Broadcast(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, root int, s *gpu.Stream) error {
	if err := d.c.CheckRoot(root); err != nil {
		return err
	}
	sc := count
	if d.c.Rank() != root {
		send, sc = nil, -1
	}
	return d.call(ctx, s, &Op{Kind: Broadcast, Send: send, Recv: recv, Count: count, DT: dt, Root: root}, sc, count)
}

// Reduce combines send (count elements) across ranks into root's recv. recv
// is only written on root (nil elsewhere is fine).
func (d *DeviceComm) Reduce(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, root int, s *gpu.Stream) error {
	if err := d.c.CheckRoot(root); err != nil {
		return err
	}
	rc := count
	if d.c.Rank() != root {
		recv, rc = nil, -1
	}
	return d.call(ctx, s, &Op{Kind: Reduce, Send: send, Recv: recv, Count: count, DT: dt, Op: op, Root: root}, count, rc)
}

// AllToAll sends block j of send (count elements per block, Size() blocks)
// to rank j, which stores it as block Rank() of its recv.
func (d *DeviceComm) AllToAll(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, s *gpu.Stream) error {
	n := count * d.c.Size()
	return d.call(ctx, s, &Op{Kind: AllToAll, Send: send, Recv: recv, Count: count, DT: dt}, n, n)
}

// Group runs sends and receives together (ncclGroupStart/End around
// ncclSend/ncclRecv): the i-th send from a to b matches b's i-th receive
// from a, and the sizes must agree. Only the ranks named take part.
func (d *DeviceComm) Group(ctx context.Context, s *gpu.Stream, ops ...P2P) error {
	ps := make([]P2P, len(ops))
	for i, o := range ops {
		if err := d.c.CheckPeer(o.Peer); err != nil {
			return fmt.Errorf("gpu group entry %d: %w", i, err)
		}
		if err := d.local("group entry", o.Buf, -1); err != nil {
			return fmt.Errorf("gpu group entry %d: %w", i, err)
		}
		ps[i] = o
	}
	if s == nil || s.Device() != d.dev {
		return fmt.Errorf("rank %d: gpu group: stream is not on %s", d.c.Rank(), d.dev)
	}
	o := &Op{Kind: Group, P2P: ps, DT: dtype.Uint8}
	if err := d.captureOf(o, s); err != nil {
		return err
	}
	return d.run(ctx, "gpu "+o.Kind.String(), o, s)
}

// Send sends b to peer; Recv receives b from peer (each a Group of one).
func (d *DeviceComm) Send(ctx context.Context, b *gpu.Buffer, peer int, s *gpu.Stream) error {
	return d.Group(ctx, s, SendTo(peer, b))
}
func (d *DeviceComm) Recv(ctx context.Context, b *gpu.Buffer, peer int, s *gpu.Stream) error {
	return d.Group(ctx, s, RecvFrom(peer, b))
}

// call checks o's buffers (send holds sendCount elements, recv recvCount;
// -1: the rank has none), trims them to size and runs o.
func (d *DeviceComm) call(ctx context.Context, s *gpu.Stream, o *Op, sendCount, recvCount int) error {
	what := o.Kind.what()
	if !o.DT.Valid() || (o.Kind == AllReduce || o.Kind == ReduceScatter || o.Kind == Reduce) && !o.Op.Valid() {
		return fmt.Errorf("rank %d: %s: invalid dtype %v or op %v", d.c.Rank(), what, o.DT, o.Op)
	}
	if o.Count < 0 {
		return fmt.Errorf("rank %d: %s: negative count %d", d.c.Rank(), what, o.Count)
	}
	if s == nil || s.Device() != d.dev {
		return fmt.Errorf("rank %d: %s: stream is not on %s", d.c.Rank(), what, d.dev)
	}
	sz := o.DT.Size()
	var err error
	if sendCount >= 0 {
		if err = d.localSide(what, " send", o.Send, sendCount*sz); err != nil {
			return err
		}
		o.Send = trimmed(o.Send, sendCount*sz)
	}
	if recvCount >= 0 {
		if err = d.localSide(what, " recv", o.Recv, recvCount*sz); err != nil {
			return err
		}
		o.Recv = trimmed(o.Recv, recvCount*sz)
	}
	if err := d.captureOf(o, s); err != nil {
		return err
	}
	return d.run(ctx, what, o, s)
}

// run runs o under the communicator's queue, on the caller's thread.
// Enqueue and return comes from the plane (the flag kernels, which meet
// their peers inside the GPU), never from a library thread: a thread that
// makes driver calls while a caller's stream waits for it deadlocks
// against any synchronous copy on another thread of the process (seen on
// an H200 under PyTorch: the thread's cuLaunchKernel waited behind the
// main thread's pageable cuMemcpyDtoHAsync, which waited for the stream).
func (d *DeviceComm) run(ctx context.Context, what string, o *Op, s *gpu.Stream) error {
	return d.c.Run(ctx, what, func(ctx context.Context) error { return d.do(ctx, o, s) })
}

// local checks that b is on the DeviceComm's GPU and holds at least n bytes
// (n < 0: any length; b nil with n < 0 is fine).
// localSide is local for what+side, the name made only for an error (a
// call makes no string).
func (d *DeviceComm) localSide(what, side string, b *gpu.Buffer, n int) error {
	if b != nil && b.Device() == d.dev && b.Len() >= n {
		return nil
	}
	return d.local(what+side, b, n)
}

// trimmed is b's first n bytes: b itself when it holds exactly n (a call
// makes no Buffer then).
func trimmed(b *gpu.Buffer, n int) *gpu.Buffer {
	if b.Len() == n {
		return b
	}
	return b.Sub(0, n)
}

func (d *DeviceComm) local(what string, b *gpu.Buffer, n int) error {
	if b == nil {
		if n < 0 {
			return nil
		}
		return fmt.Errorf("rank %d: %s: nil buffer", d.c.Rank(), what)
	}
	if b.Device() != d.dev {
		return fmt.Errorf("rank %d: %s: buffer is on %s, not %s", d.c.Rank(), what, b.Device(), d.dev)
	}
	if b.Len() < n {
		return fmt.Errorf("rank %d: %s: buffer holds %d bytes, need %d: %w", d.c.Rank(), what, b.Len(), n, errs.ErrMismatch)
	}
	return nil
}

// Plane is the plane behind d (for tests that look inside it).
func (d *DeviceComm) Plane() Plane { return d.plane }
