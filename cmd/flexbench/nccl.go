package main

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/cmd/flexbench/internal/nccl"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/rank"
)

// ncclColl runs the same calls through NCCL (libnccl.so.2, loaded at run
// time) in the same processes, on the same buffers and stream, so flexbench
// --backend nccl|both compares like with like. The ncclUniqueId travels
// over flexlink's own host broadcast.
type ncclColl struct {
	comm *nccl.Comm
}

func openNCCL(ctx context.Context, c *rank.Comm, dev *gpu.Device) (*ncclColl, error) {
	lib, err := nccl.Open()
	if err != nil {
		return nil, err
	}
	var id nccl.UniqueID
	if c.Rank() == 0 {
		if id, err = lib.GetUniqueID(); err != nil {
			return nil, err
		}
	}
	b := rank.Bytes(id[:], dtype.Uint8)
	if err := c.Broadcast(ctx, b, b, 0); err != nil {
		return nil, fmt.Errorf("share the nccl unique id: %w", err)
	}
	comm, err := lib.InitRankOn(c.Size(), c.Rank(), id, dev.Run)
	if err != nil {
		return nil, err
	}
	return &ncclColl{comm: comm}, nil
}

func (n *ncclColl) name() string                { return "nccl" }
func (n *ncclColl) close(context.Context) error { return n.comm.Destroy() }

func (n *ncclColl) run(_ context.Context, op string, send, recv *gpu.Buffer, count int, dt dtype.DType, rop dtype.Op, root int, s *gpu.Stream) error {
	c, st := n.comm, s.Handle()
	switch op {
	case "allreduce":
		return c.AllReduce(send.Ptr(), recv.Ptr(), count, dt, rop, st)
	case "allgather":
		return c.AllGather(send.Ptr(), recv.Ptr(), count, dt, st)
	case "reducescatter":
		return c.ReduceScatter(send.Ptr(), recv.Ptr(), count, dt, rop, st)
	case "broadcast":
		return c.Broadcast(send.Ptr(), recv.Ptr(), count, dt, root, st)
	case "reduce":
		return c.Reduce(send.Ptr(), recv.Ptr(), count, dt, rop, root, st)
	case "alltoall":
		return c.AllToAll(send.Ptr(), recv.Ptr(), count, dt, st)
	case "sendrecv":
		size, me := c.Size(), c.Rank()
		return c.Group(func() error {
			if err := c.Send(send.Ptr(), count, dt, (me+1)%size, st); err != nil {
				return err
			}
			return c.Recv(recv.Ptr(), count, dt, (me+size-1)%size, st)
		})
	}
	return fmt.Errorf("--backend nccl: %s is not supported", op)
}
