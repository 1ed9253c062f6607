package rank

import (
	"context"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/comm/device"
)

// pxnCaller is the communicator as the GPU planes see it, with its PXN
// all-to-all (collectives/staged.PXN): the staged plane sends a GPU
// all-to-all that crosses hosts through the PXN proxy when FLEXLINK_PXN
// applies.
type pxnCaller struct{ *comm.Comm }

func (c pxnCaller) PXNAllToAllv(ctx context.Context, send, recv [][]byte) (bool, error) {
	return comm.PXNAllToAllv(ctx, c.Comm, send, recv)
}

// PXNHandoff and PXNAllToAllvGathered are the GPU hand-off
// (collectives/staged's PXNHandoff; FLEXLINK_PXN_GPU_HANDOFF).
func (c pxnCaller) PXNHandoff(ctx context.Context) (func(s, d int) int, bool, error) {
	return comm.PXNHandoff(ctx, c.Comm)
}

func (c pxnCaller) PXNAllToAllvGathered(ctx context.Context, send, recv [][]byte, gathered map[[2]int][]byte) (bool, error) {
	return comm.PXNAllToAllvGathered(ctx, c.Comm, send, recv, gathered)
}

// PXNGroup is a group of staged sends and receives (collectives/staged's
// PXNGroup): through the PXN group service for the messages whose route
// goes through a relay when FLEXLINK_PXN_GROUP runs it, else the engine.
func (c pxnCaller) PXNGroup(ctx context.Context, ops []collectives.P2P) error {
	return comm.Group(ctx, c.Comm, ops)
}

// AllToAllv sends sendCounts[j] elements to rank j and receives
// recvCounts[i] elements from rank i (MPI_Alltoallv without
// displacements: the blocks lie one after another in rank order, in send
// and in recv; send and recv must not overlap; a buffer may be nil when
// its counts are all 0). sendCounts[j] on this rank must equal
// recvCounts[this rank] on rank j. Every rank calls it.
//
// On the staged plane (ranks on several hosts) it runs as one call: the
// blocks are staged through pinned host memory and, with FLEXLINK_PXN set,
// blocks for other hosts follow the PXN routes, like AllToAll's
// (docs/PXN.md). On the direct plane it runs as a Group of sends and
// receives.
func (d *DeviceComm) AllToAllv(ctx context.Context, send, recv *gpu.Buffer, sendCounts, recvCounts []int, dt dtype.DType, s *gpu.Stream) error {
	if err := device.Check(d.d); err != nil {
		return err
	}
	return d.d.AllToAllv(ctx, send, recv, sendCounts, recvCounts, dt, s)
}
