package rank

import (
	"context"
	"fmt"

	"flexlink/collectives/direct"
	"flexlink/gpu"
	"flexlink/internal/comm"
	"flexlink/internal/comm/device"
)

// Comm is a communicator: a group of ranks that run collectives together.
// Its methods are safe for concurrent use; collectives on one Comm run one
// at a time, in call order (as on one NCCL stream). Collectives on different
// communicators run concurrently and never cross-talk: each has its own links.
//
// A collective that fails (peer lost, mismatch, deadline) breaks the job:
// the failing rank aborts it through the bootstrap, so every rank's pending
// and later calls fail with an error that wraps the same sentinel and says
// which rank failed and why. Nothing waits forever.
type Comm struct {
	c *comm.Comm // the communicator core (internal/comm)
}

// NoColor passed as color to Split gives the caller no new communicator
// (NCCL_SPLIT_NOCOLOR).
const NoColor = comm.NoColor

// LinkReport describes one link a communicator has opened.
type LinkReport = comm.LinkReport

// Rank is this process's rank in the communicator.
func (c *Comm) Rank() int { return c.c.Rank() }

// Size is the number of ranks in the communicator.
func (c *Comm) Size() int { return c.c.Size() }

// WorldRank is this process's rank in the world communicator.
func (c *Comm) WorldRank() int { return c.c.WorldRank() }

// Host is this process's host name.
func (c *Comm) Host() string { return c.c.Host() }

// PeerHost is the host of the communicator's rank r.
func (c *Comm) PeerHost(r int) string { return c.c.PeerHost(r) }

// LocalRank is this rank's index among the communicator's ranks on its host.
func (c *Comm) LocalRank() int { return c.c.LocalRank() }

// LocalSize is the number of the communicator's ranks on this host.
func (c *Comm) LocalSize() int { return c.c.LocalSize() }

// Links reports the links this communicator has opened so far.
func (c *Comm) Links() []LinkReport { return c.c.Links() }

// Abort ends the whole job: every rank's pending and later calls fail with
// an error carrying reason.
func (c *Comm) Abort(reason error) { c.c.Abort(reason) }

// Close releases the communicator's links and endpoints. Closing the world
// communicator also leaves the job (says goodbye to the bootstrap), so the
// other ranks do not report this rank as lost.
func (c *Comm) Close() error { return c.c.Close() }

// Split partitions the communicator, like ncclCommSplit and MPI_Comm_split:
// ranks that pass the same color form a new communicator, ordered by key and
// then by their rank in c. Every rank of c must call it. A rank that passes a
// negative color (NoColor) takes part but gets nil. The new communicator has
// its own links, so its collectives never mix with c's or a sibling's.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	s, err := c.c.Split(ctx, color, key)
	if err != nil || s == nil {
		return nil, err
	}
	return &Comm{c: s}, nil
}

// Device returns the communicator's plane for buffers on dev (see
// DeviceComm). Every rank of the communicator calls it, each with its GPU.
func (c *Comm) Device(ctx context.Context, dev *gpu.Device) (*DeviceComm, error) {
	cfg, err := direct.ReadConfig(c.c.Env())
	if err != nil {
		return nil, fmt.Errorf("rank %d on %s: gpu settings: %w", c.c.WorldRank(), c.c.Host(), err)
	}
	d, err := device.New(ctx, pxnCaller{c.c}, dev, cfg) // device_alltoallv.go
	if err != nil {
		return nil, err
	}
	return &DeviceComm{d: d, c: c}, nil
}

// Shrink makes a communicator of c's ranks minus exclude (ranks of c), in
// rank order, like ncclCommShrink: only the remaining ranks call it, and
// nothing is sent to the excluded ones. A rank that died has already ended
// the job (flexlink's failure model), so Shrink is for ranks that leave.
func (c *Comm) Shrink(ctx context.Context, exclude []int) (*Comm, error) {
	s, err := c.c.Shrink(ctx, exclude)
	if err != nil {
		return nil, err
	}
	return &Comm{c: s}, nil
}
