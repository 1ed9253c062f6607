package direct

import (
	"context"
	"fmt"
	"math"

	"github.com/flexlink/flexlink/collectives/flagplane"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
)

// CUDA graph capture on the direct plane (collectives/plane/capture.go
// says what a capture asks of a plane). What replays:
//
//   - one rank: every collective is a copy of send into recv (or nothing
//     in place), enqueued as it is;
//   - more ranks: the collectives the flag kernels serve (allreduce,
//     reduce-scatter, allgather, alltoall, broadcast, reduce) at any size,
//     and a two-rank group of one send, one receive, or one send and one
//     receive of the same size. The kernels meet their peers through
//     cumulative counters in device memory (gpu/kernels/flag.cu), so a
//     replay is one more call for them: nothing on the host is frozen in
//     the graph. Sizes past the eager limits (FLEXLINK_GPU_FLAG_COLL_BYTES)
//     take the kernels too: they loop over their slots, chunk by chunk.
//     An in-place alltoall first copies its send blocks into memory of the
//     graph's own (gpu.Stream.GraphAlloc).
//
// Ranks that share a GPU run their eager calls on other paths (the leader
// path, the event protocol) but keep the flag kernels for captured calls
// (setup.go): on one GPU without MPS each kernel waits for the other
// process's time slice, so a replayed call takes milliseconds, but it is
// right.
//
// What is refused (ErrNotCapturable, before the call touches anything):
// a plane with the flag kernels off, the handshake paths (groups of other
// shapes, send/recv beyond two ranks), alltoallv as one call, and an
// allreduce that would use the large region's PCIe part
// (FLEXLINK_GPU_FLAG_PCIE_BLOCKS: its split is planned on the host per
// call).
//
// Order. A rank's flag kernels must run one after another, replays and
// eager calls alike. Every flag call ends by recording its last event; in
// a capture the record is an event record node on a side branch, after
// the call's kernels and the capture's previous record (RecordBranch; the
// kernels do not wait for it), and the capture's first flag call starts with an event wait node on it
// (WaitExternal), so each replay waits for the latest flag call enqueued
// before it and records its own end; once a plane has captured, every
// eager flag call waits on last too, whatever its stream. Two streams of
// one capture are joined with an event recorded in the capture
// (flagCapture.ev).
//
// Lifetime. A capture that holds a flag call holds the plane's device
// memory (its regions, the peers' regions mapped here, the error word, the
// order events) for the graph's life, through a CUDA user object: Close
// and Release hand what a graph still uses to it, and the last graph's
// destruction frees it (graphHolds). Replaying a graph after its
// communicator is destroyed is not supported, as in NCCL (nothing watches
// for a lost peer any more).
//
// Host bookkeeping the graph cannot update is not assumed per call: the
// PCIe part is off, LinkShares describes the last eager call, and the call
// count (flagplane.State's Calls) counts eager calls only.

// CaptureBlocker says why o cannot run on a capturing stream
// (plane.Capturer).
func (p *directPlane) CaptureBlocker(o *plane.Op) string {
	if p.n == 1 {
		if o.Kind == plane.Group || o.Kind == plane.AllToAllv {
			return "send/recv on a communicator of one rank"
		}
		return ""
	}
	f := p.flag
	if f == nil {
		return "the flag kernels are off on this communicator (FLEXLINK_GPU_FLAG_BYTES=0 or more than 8 ranks), and its other paths meet the peers through host messages at every call"
	}
	b := o.Count * o.DT.Size()
	switch o.Kind {
	case plane.AllReduce:
		if f.HasPCIe() && b >= flagplane.SmallMax {
			return "an allreduce of 32 MiB or more with the flag kernels' PCIe part on (FLEXLINK_GPU_FLAG_PCIE_BLOCKS), whose split the host plans at every call"
		}
	case plane.ReduceScatter, plane.AllGather, plane.Broadcast, plane.Reduce:
	case plane.AllToAll:
	case plane.Group:
		if !f.P2PShape(o, math.MaxInt) {
			return "grouped send/recv replays only as one send, one receive, or one send and one receive of the same size between the two ranks of a two-rank communicator (other groups meet the peers through host messages)"
		}
	default:
		return fmt.Sprintf("%s meets the peers through host messages", o.Kind)
	}
	return ""
}

// captured enqueues o, which CaptureBlocker accepted, on the capturing
// stream s.
func (p *directPlane) captured(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	if p.n == 1 {
		return selfCopy(o, s)
	}
	if o.Kind != plane.Group && o.Count == 0 {
		return nil
	}
	if o.Kind == plane.AllToAll && overlaps(o.Send, o.Recv) {
		// In place: the send blocks go to a copy of the graph's own first
		// (eager calls stage through p.scratch, ordered by events).
		tmp, err := s.GraphAlloc(o.Send.Len())
		if err != nil {
			return err
		}
		if err := s.CopyDtoD(tmp, o.Send); err != nil {
			return err
		}
		staged := *o
		staged.Send = tmp
		o = &staged
	}
	return p.flag.Call(ctx, o, s)
}

// selfCopy is a one-rank collective: recv is send (sum, avg, min, max of
// one vector; its one block), copied unless they are the same memory.
func selfCopy(o *plane.Op, s *gpu.Stream) error {
	src, dst := o.Send, o.Recv
	if src == nil || dst == nil || src.Len() == 0 || src.Ptr() == dst.Ptr() {
		return nil
	}
	n := min(src.Len(), dst.Len())
	return s.CopyDtoD(dst.Sub(0, n), src.Sub(0, n)) // as NCCL; a one-rank job loads no kernels
}
