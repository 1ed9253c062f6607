package collectives

import (
	"time"

	"github.com/flexlink/flexlink/dtype"
)

// OpSendRecv is Call.Op of a send/recv group.
const OpSendRecv = "send/recv"

// Call describes one collective call for logs, like the line NCCL writes
// per call with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL. Its strings
// are constants: building one does not allocate.
type Call struct {
	Comm  uint64 // communicator id (the same on every rank)
	Seq   uint64 // call number on this communicator (opCount)
	Op    string // allreduce, allgather, ..., send/recv
	Algo  string // ring, rd, chain, tree, pairwise, local, ...
	Ranks int    // communicator size
	Rank  int    // this rank in the communicator
	CallArgs
	CallEnd
}

// CallArgs are a call's arguments.
type CallArgs struct {
	Count int64       // elements (bytes for send/recv)
	DType dtype.DType // valid only when HasDType
	RedOp dtype.Op    // valid only when HasRedOp
	Root  int         // -1 when the collective has none
	// Peers is the number of transfers in a send/recv group (0 otherwise).
	Peers int

	HasDType, HasRedOp bool
}

// CallEnd is set on the second event of a call (End): how long it took
// on this rank and how it ended.
type CallEnd struct {
	End     bool
	Elapsed time.Duration
	Err     error
}

// Observer sees every collective call twice, when it starts (after its
// arguments are checked and its algorithm chosen) and when it ends. It
// runs on the caller's goroutine and must not block; it must not keep
// Err's buffers. Calls rejected for bad arguments are not observed.
type Observer func(Call)

// observing reports one engine's calls to its Observer, if any.
type observing struct {
	obs        Observer // nil: calls are not observed
	comm       uint64
	rank, size int
}

func (o *observing) describe(h header) Call {
	c := Call{Comm: o.comm, Seq: h.seq, Op: h.kind.String(), Algo: h.algo.String(), Ranks: o.size, Rank: o.rank,
		CallArgs: CallArgs{Count: h.count, DType: h.dt, RedOp: h.op, Root: h.root,
			HasDType: h.dt != noField, HasRedOp: h.op != noField}}
	if h.kind == kindP2P {
		c.Seq = 0
	}
	return c
}

// start and end report h to the observer, if any.
func (o *observing) start(h header, peers int) time.Time {
	if o.obs == nil {
		return time.Time{}
	}
	c := o.describe(h)
	c.Peers = peers
	o.obs(c)
	return time.Now()
}

func (o *observing) end(h header, peers int, start time.Time, err error) {
	if o.obs == nil {
		return
	}
	c := o.describe(h)
	c.Peers, c.End, c.Elapsed, c.Err = peers, true, time.Since(start), err
	o.obs(c)
}
