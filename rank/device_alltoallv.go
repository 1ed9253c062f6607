package rank

import (
	"context"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/comm/device"
)

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
