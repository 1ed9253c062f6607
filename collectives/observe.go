package collectives

import (
	"time"

	"flexlink/dtype"
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

// SetObserver installs o (nil: none). Set it before the first call; with
// none the engine does no work for it.
func (e *Engine) SetObserver(o Observer) { e.obs = o }

func (e *Engine) describe(h header) Call {
	c := Call{Comm: e.comm, Seq: h.seq, Op: h.kind.String(), Algo: h.algo.String(), Ranks: e.sz, Rank: e.rank,
		CallArgs: CallArgs{Count: h.count, DType: h.dt, RedOp: h.op, Root: h.root,
			HasDType: h.dt != noField, HasRedOp: h.op != noField}}
	if h.kind == kindP2P {
		c.Seq = 0
	}
	return c
}

// observeStart and observeEnd report h to the observer, if any.
func (e *Engine) observeStart(h header, peers int) time.Time {
	if e.obs == nil {
		return time.Time{}
	}
	c := e.describe(h)
	c.Peers = peers
	e.obs(c)
	return time.Now()
}

func (e *Engine) observeEnd(h header, peers int, start time.Time, err error) {
	if e.obs == nil {
		return
	}
	c := e.describe(h)
	c.Peers, c.End, c.Elapsed, c.Err = peers, true, time.Since(start), err
	e.obs(c)
}
