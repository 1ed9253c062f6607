package rank

import (
	"context"
	"fmt"

	"github.com/flexlink/flexlink/collectives/direct"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/comm"
	"github.com/flexlink/flexlink/internal/comm/device"
)

// Comm is a communicator: a group of ranks that run collectives together.
// Its methods are safe for concurrent use; collectives on one Comm run one
// at a time, in call order (as on one NCCL stream). Collectives on different
// communicators run concurrently and never cross-talk: each has its own links.
//
// A collective that fails (peer lost, mismatch, deadline) ends the
// communicator on every member: the failing rank publishes why through the
// bootstrap, so every member's pending and later calls on it fail with an
// error that wraps the same sentinel and says which communicator, which
// rank and why. Other communicators go on (a lost rank ends every one that
// holds it). Nothing waits forever.
type Comm struct {
	c *comm.Comm // the communicator core (internal/comm)
}

// NoColor passed as color to Split gives the caller no new communicator
// (NCCL_SPLIT_NOCOLOR).
const NoColor = comm.NoColor

// LinkReport describes one link a communicator has opened: the peer (its
// rank in the communicator and in the world, and its host), the link's
// kind (shm, tcp, or net0, net1, ... one per network rail) and a
// description (device, address).
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

// Abort ends the whole job: every rank's pending and later calls on every
// communicator fail with an error carrying reason (wrapping ErrAborted).
// Revoke ends one communicator.
func (c *Comm) Abort(reason error) { c.c.Abort(reason) }

// Revoke ends this communicator on every member, and nothing else (its
// parent, siblings and children go on): their pending and later calls on
// it fail with an error naming it, this rank, its host and reason, and
// wrapping ErrAborted (or reason's own sentinel: ErrPeerLost, ErrMismatch,
// ErrTimeout). On a communicator that has ended already it passes on the
// first reason instead. Close it afterwards; Shrink still works on it.
// Safe from any goroutine, also while a call on c is in flight.
func (c *Comm) Revoke(reason error) { c.c.Revoke(reason) }

// Err is nil while the communicator is healthy, then the reason it ended:
// a member failed, revoked it or was lost, or the job ended.
func (c *Comm) Err() error { return c.c.Err() }

// Done is closed when the communicator ends (see Err).
func (c *Comm) Done() <-chan struct{} { return c.c.Done() }

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
	d, err := device.New(ctx, c.c, dev, cfg) // with its PXN methods (collectives/staged.PXN)
	if err != nil {
		return nil, err
	}
	return &DeviceComm{d: d, c: c}, nil
}

// Shrink makes a communicator of c's ranks minus exclude (ranks of c), in
// rank order, like ncclCommShrink: only the remaining ranks call it, and
// nothing is sent to the excluded ones or over c's links, so it also
// works on a communicator that has ended (revoked, or failed because a
// member died). Under flexrun a rank that dies ends the job, so there
// Shrink is for ranks that leave; a job whose rendezvous keeps going after
// a loss (libnccl's; bootstrap.ServerConfig.KeepOnLoss) shrinks dead ranks
// away.
func (c *Comm) Shrink(ctx context.Context, exclude []int) (*Comm, error) {
	s, err := c.c.Shrink(ctx, exclude)
	if err != nil {
		return nil, err
	}
	return &Comm{c: s}, nil
}
