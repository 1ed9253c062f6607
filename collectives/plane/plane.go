// Package plane is the contract between a communicator and the data planes
// that run its collectives on GPU buffers (collectives/direct,
// collectives/staged): the call (Op), what a plane needs from its
// communicator (Host), and what the communicator needs from a plane (Plane).
// It holds no implementation, so a plane is built and tested from a Host and
// a Config struct, without the communicator core.
package plane

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
)

// Kind names a device collective.
type Kind uint8

const (
	AllReduce Kind = iota + 1
	AllGather
	ReduceScatter
	Broadcast
	Reduce
	AllToAll
	Group
	AllToAllv // counts per peer (alltoallv.go)
)

func (k Kind) String() string {
	if k < AllReduce || k > AllToAllv {
		return "unknown"
	}
	return [...]string{"", "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "group send/recv", "alltoallv"}[k]
}

// what names a call of kind k in errors and logs ("gpu allreduce"), a
// constant: a call makes no string.
func (k Kind) what() string {
	switch k {
	case AllReduce:
		return "gpu allreduce"
	case AllGather:
		return "gpu allgather"
	case ReduceScatter:
		return "gpu reducescatter"
	case Broadcast:
		return "gpu broadcast"
	case Reduce:
		return "gpu reduce"
	case AllToAll:
		return "gpu alltoall"
	case Group:
		return "gpu group send/recv"
	case AllToAllv:
		return "gpu alltoallv"
	}
	return "gpu unknown"
}

// Op is one call, its buffers already trimmed to the bytes it touches.
type Op struct {
	Kind       Kind
	Send, Recv *gpu.Buffer // nil where the rank has none (rooted ops)
	Count      int         // elements, NCCL's meaning for Kind
	DT         dtype.DType
	Op         dtype.Op
	Root       int
	P2P        []P2P
	// AllToAllv: bytes sent to and received from each peer, blocks one
	// after another in rank order in Send and Recv.
	SendBytes, RecvBytes []int
	// Capture is the id of the CUDA graph capture the call's stream is in
	// (0: none): the plane enqueues only work that replays correctly with
	// no host involvement (Capturer said it can).
	Capture uint64
	// Self is a Group's one send and receive to the rank itself (the zero
	// SideCopy: none; P2P then names peers only): the plane copies it on
	// the call's stream, inside a flag kernel where one runs.
	Self gpu.SideCopy
}

// P2P is one send or receive of a Group; Buf is the whole message.
type P2P struct {
	Send bool
	Peer int
	Buf  *gpu.Buffer
}

// Host is what a plane needs from the communicator it serves: who the ranks
// are, host collectives and links for its handshakes, the job's fate, and
// a logger. comm.Comm implements it.
//
// Engine and Peers may be used only inside a call (Plane.Do, or a plane's
// constructor, which runs under the communicator's queue): collectives on
// one communicator run one at a time. JobErr is nil while the communicator
// is healthy and the reason it ended after (a member failed, revoked it or
// was lost, or the job ended: see rank.Comm); JobDone is closed then.
// AbortJob ends the communicator for every member with err (comm.Comm's
// Revoke).
type Host interface {
	Rank() int
	Size() int
	WorldRank() int
	Host() string
	PeerHost(r int) string
	// SameProcess reports whether rank r lives in this process (CUDA IPC
	// needs separate processes).
	SameProcess(r int) bool
	Name() string // the communicator's name (logs)
	ID() uint64   // the communicator's id (message tags)
	Engine() *collectives.Engine
	Peers() collectives.Peers
	Log() hclog.Logger
	JobErr() error
	JobDone() <-chan struct{}
	AbortJob(err error)
}

// Plane is one way of running device-buffer collectives.
type Plane interface {
	// Do is called under the communicator's queue (one call at a time,
	// with its deadline and abort handling); it enqueues o's work on s and
	// returns without waiting for the GPU. o belongs to the caller again
	// once Do returns (the DeviceComm reuses it, callrec.go): a plane
	// that needs the call later keeps a copy, not o. So is ctx the call's
	// only (the communicator reuses it, see comm.Run): work that outlives
	// Do neither keeps nor derives from it.
	Do(ctx context.Context, o *Op, s *gpu.Stream) error
	// Quiesce waits until this rank's long-running kernels, which peers
	// write into, have ended; Close's caller calls it before the closing
	// barrier.
	Quiesce() error
	// Close releases the plane's resources. clean says the ranks passed the
	// closing barrier: without it, memory that peers may still write into
	// is leaked rather than freed.
	Close(clean bool) error
	// AsyncError reports a failure met inside the GPU by work already
	// enqueued (ncclCommGetAsyncError); nil when none.
	AsyncError() error
	// LinkShares reports the share of the bytes each link carried (empty
	// when the plane has one link).
	LinkShares() map[string]float64
}

// Capturer is a Plane that can enqueue some calls on a stream that is
// being captured into a CUDA graph (capture.go).
type Capturer interface {
	// CaptureBlocker says why o cannot be enqueued on a capturing stream
	// ("" when it can). It is pure (no driver call, no message), and every
	// rank of a correct program decides alike from the same call.
	CaptureBlocker(o *Op) string
}
