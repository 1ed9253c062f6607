package rank

import (
	"context"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/comm/device"
)

// DeviceComm runs a communicator's collectives on GPU buffers with NCCL's
// stream semantics: a call returns once the work is enqueued on the
// caller's stream s; the work starts after the work enqueued on s before
// the call, and work enqueued on s afterwards waits for it (including the
// peers' reads of this rank's send buffer and writes into its recv buffer).
// On the direct plane the host blocks only for small handshakes with the
// peers (none for the calls the flag kernels serve, which with
// FLEXLINK_GPU_ENQUEUE=async take every size), never for the data; on the
// staged plane the call waits on the host for the copies and the host
// algorithms.
//
// Get one with Comm.Device; every rank of the communicator calls it. Calls
// go through the Comm's queue (one collective at a time, in call order),
// and a failure ends the communicator on every member, like a host
// collective's (see Comm).
//
// Two data planes sit behind it (Path says which one the ranks agreed on):
//   - direct: every rank on one host, in a process of its own, every pair
//     of GPUs with peer access (ranks that share one GPU count: without
//     CUDA MPS their calls run through one leader, FLEXLINK_GPU_SHARED).
//     FLEXLINK_GPU_PATH=staged forces the
//     staged plane; =direct makes Comm.Device fail where a rank cannot use
//     it. Ranks map each other's user buffers through CUDA IPC (once per
//     allocation, then cached) and move data with SM kernels (stores into
//     and loads from the peers' memory), copy engines and reduction
//     kernels; the allreduce runs as one flag kernel per rank without host
//     messages (collectives/direct); large pushes give a share, chosen by a
//     balancer, to PCIe through shared pinned host memory (LinkShares
//     reports it). See docs/GPU.md and docs/ARCHITECTURE.md.
//   - staged: anything else. Buffers are copied through pinned host memory
//     and the host algorithms run on the copies. Correct, not fast; see docs/GPU.md.
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
	d *plane.DeviceComm
	c *Comm
}

// DeviceP2P is one send or receive of DeviceComm.Group.
type DeviceP2P = plane.P2P

// DeviceSendTo makes a send of b to peer, an entry of DeviceComm.Group.
func DeviceSendTo(peer int, b *gpu.Buffer) DeviceP2P { return plane.SendTo(peer, b) }

// DeviceRecvFrom makes a receive of b from peer, an entry of
// DeviceComm.Group.
func DeviceRecvFrom(peer int, b *gpu.Buffer) DeviceP2P { return plane.RecvFrom(peer, b) }

// Path is the data plane the ranks agreed on: "direct" or "staged".
func (d *DeviceComm) Path() string { return d.d.Path() }

// Comm is the host communicator the DeviceComm belongs to.
func (d *DeviceComm) Comm() *Comm { return d.c }

// GPU is the device whose buffers the DeviceComm moves.
func (d *DeviceComm) GPU() *gpu.Device { return d.d.GPU() }

// LinkShares reports how the last call's pushes from this rank to its
// peers were divided among link kinds: "nvlink" (SM kernels or copy
// engines), "pcie" (staged through host memory) and, when FLEXLINK_LINKS
// names net, "net" (staged through the NIC's loopback) as fractions of the
// bytes pushed, summing to 1. It is empty after a call that pushed nothing (reductions that only
// read; broadcast and send/recv on the handshake paths, where receivers
// pull; on the flag kernels a broadcast's non-roots, a receive and a
// reduce's root, which send headers only; a zero count) and on the staged
// plane. Safe to call from any goroutine.
func (d *DeviceComm) LinkShares() map[string]float64 { return d.d.LinkShares() }

// Close releases the mappings, events and streams. It is collective (the
// ranks pass a barrier first, so none is still mid-call), and the streams
// passed to earlier calls must have been synchronized, as before freeing
// memory they use.
func (d *DeviceComm) Close(ctx context.Context) error { return d.d.Close(ctx) }

// ErrSuspended is wrapped by the error of a call on a suspended
// DeviceComm.
var ErrSuspended = device.ErrSuspended

// ErrNotSuspended is wrapped by the error of Resume on a DeviceComm that
// is not suspended.
var ErrNotSuspended = device.ErrNotSuspended

// Suspend releases the DeviceComm's GPU memory, as ncclCommSuspend with
// NCCL_SUSPEND_MEM (vLLM's sleep mode): on the direct plane its flag
// regions, scratch and mappings of the peers' buffers (the staged plane
// holds none between calls). It is collective: every rank calls it (they
// wait for their own kernels and pass a barrier, so no peer writes into
// memory being freed), and it runs after the calls made before it. The
// streams of earlier calls need not be idle: what remains on them touches
// only user buffers. Until Resume every call fails with an error wrapping
// ErrSuspended, and so does a second Suspend.
func (d *DeviceComm) Suspend(ctx context.Context) error { return device.Suspend(ctx, d.d) }

// Resume makes a suspended DeviceComm usable again (ncclCommResume). It is
// collective (a barrier: every rank has resumed before any uses it); the
// memory comes back as calls need it (the flag regions at the first flag
// call, with every rank), and results are as before. On a DeviceComm that
// is not suspended it fails with an error wrapping ErrNotSuspended.
func (d *DeviceComm) Resume(ctx context.Context) error { return device.Resume(ctx, d.d) }

// DeviceMemory is what a DeviceComm holds on its GPU: its plane (Path:
// the staged plane holds none between calls), Bytes of device memory now,
// the flag regions (their sizes, or "lazy": made on first use), whether it
// is suspended. String gives it in one line (the NCCL_DEBUG=INFO line).
type DeviceMemory = device.Memory

// Memory reports what the DeviceComm holds on its GPU now: device memory
// it allocated (not the context, streams, events, or IPC mappings of the
// peers' memory). Safe to call from any goroutine; its String is the line
// NCCL_DEBUG=INFO prints per communicator.
func (d *DeviceComm) Memory() DeviceMemory { return device.MemoryOf(d.d) }

// AsyncError reports a failure that work already enqueued has met inside
// the GPU, as ncclCommGetAsyncError does: a flag kernel (the small and
// two-rank allreduce) that waited longer than FLEXLINK_GPU_KERNEL_TIMEOUT
// for a peer, found that the peer called another allreduce, or was ended
// early because the job was aborted (a peer lost or failed). The error
// names the peer and its host; once it is set, every later call on the
// communicator fails. Call it after synchronising the stream when a
// collective's result matters and no later call follows.
func (d *DeviceComm) AsyncError() error { return d.d.AsyncError() }

// AllReduce combines send (count elements) across ranks with op into every
// rank's recv. send may equal recv.
func (d *DeviceComm) AllReduce(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.AllReduce(ctx, send, recv, count, dt, op, s)
}

// AllGather concatenates every rank's send (count elements) in rank order
// into recv (Size()*count elements). send may be block Rank() of recv.
func (d *DeviceComm) AllGather(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.AllGather(ctx, send, recv, count, dt, s)
}

// ReduceScatter reduces send (Size()*count elements) across ranks and leaves
// block Rank() (count elements) in recv. recv may be block Rank() of send.
func (d *DeviceComm) ReduceScatter(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.ReduceScatter(ctx, send, recv, count, dt, op, s)
}

// Broadcast copies root's send (count elements) into every rank's recv.
// send is only read on root (nil elsewhere is fine).
func (d *DeviceComm) Broadcast(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, root int, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.Broadcast(ctx, send, recv, count, dt, root, s)
}

// Reduce combines send (count elements) across ranks into root's recv. recv
// is only written on root (nil elsewhere is fine).
func (d *DeviceComm) Reduce(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, root int, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.Reduce(ctx, send, recv, count, dt, op, root, s)
}

// AllToAll sends block j of send (count elements per block, Size() blocks)
// to rank j, which stores it as block Rank() of its recv.
func (d *DeviceComm) AllToAll(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.AllToAll(ctx, send, recv, count, dt, s)
}

// Group runs sends and receives together (ncclGroupStart/End around
// ncclSend/ncclRecv): the i-th send from a to b matches b's i-th receive
// from a, and the sizes must agree. Only the ranks named take part. Sends
// and receives to the rank itself pair up in order and are copies on s
// (on two ranks, inside the kernel that moves the rest).
func (d *DeviceComm) Group(ctx context.Context, s *gpu.Stream, ops ...DeviceP2P) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.Group(ctx, s, ops...)
}

// Send sends b to peer (a Group of one).
func (d *DeviceComm) Send(ctx context.Context, b *gpu.Buffer, peer int, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.Send(ctx, b, peer, s)
}

// Recv receives b from peer (a Group of one).
func (d *DeviceComm) Recv(ctx context.Context, b *gpu.Buffer, peer int, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.Recv(ctx, b, peer, s)
}
