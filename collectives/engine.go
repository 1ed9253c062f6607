package collectives

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/mem"
)

// Engine runs the collectives of one communicator on one rank.
//
// Every rank of the communicator must make the same sequence of collective
// calls with the same arguments (count, dtype, op, root) and the same
// Config, as with NCCL. A rank that does not is caught on the first message
// between it and a rank that does: the call fails on the rank that received
// that message with an error wrapping errs.ErrMismatch that names both
// ranks and what differs (see header.go). Every rank receives at least one
// message in every collective (see guard), so each call is checked; ranks
// not next to the odd one fail when the runtime aborts the job.
//
// Blocking: every method returns when the operation is complete on this
// rank, when a transfer fails (the error wraps the link's: errs.ErrPeerLost
// for a lost peer), or when ctx ends (errs.ErrTimeout for a deadline).
//
// After an error the Engine is unusable: later calls return an error
// wrapping the first. Transfers the failed call posted may still be pending
// and may still use the caller's buffers until the links are aborted; the
// rank runtime aborts the job (and so every link) on any error, which
// completes them. The Engine starts no goroutines.
//
// An Engine is not safe for concurrent use (like an NCCL communicator on
// one stream); Seq may be called from any goroutine.
type Engine struct {
	comm   uint64
	p      Peers
	m      Memory
	cfg    Config
	cfgErr error

	seq      atomic.Uint64
	p2p      p2pCount
	failed   error
	rank, sz int
	obs      observing
	// hier is this rank's rings for allreduce by host (allReduceHier),
	// from Config.Hosts once; nil when allreduce does not go by host.
	hier *hierRings
}

// Config is the engine's configuration (zero fields filled in).
func (e *Engine) Config() Config { return e.cfg }

// p2pCount numbers point-to-point messages per pair: calls are numbered
// per peer, not per communicator (Group, Send, Recv).
type p2pCount struct {
	sent  []uint64 // per peer: messages sent by Group/Send
	recvd []uint64 // per peer: messages received by Group/Recv
}

// NewEngine returns the engine of communicator commID (the same value on
// every rank; it is in every message header) over p and m. Zero fields of
// cfg take their defaults (Algo auto, ChunkBytes DefaultChunkBytes;
// Threshold 0 means ring for every size). An invalid cfg makes every call
// fail.
func NewEngine(commID uint64, p Peers, m Memory, cfg Config) *Engine {
	e := &Engine{comm: commID, p: p, m: m, cfg: cfg, rank: p.Rank(), sz: p.Size(),
		p2p: p2pCount{sent: make([]uint64, p.Size()), recvd: make([]uint64, p.Size())},
		obs: observing{comm: commID, rank: p.Rank(), size: p.Size()}}
	if e.cfg.Algo == "" {
		e.cfg.Algo = AlgoAuto
	}
	if e.cfg.ChunkBytes == 0 {
		e.cfg.ChunkBytes = DefaultChunkBytes
	}
	e.cfgErr = e.cfg.validate()
	if e.cfgErr == nil {
		e.cfgErr = e.cfg.checkRings(e.sz)
	}
	if e.cfgErr == nil {
		e.cfgErr = e.cfg.checkHosts(e.sz)
	}
	if e.cfgErr == nil {
		e.hier = e.cfg.byHost(e.rank)
	}
	return e
}

// Seq is the number of collective calls made so far (point-to-point calls
// are numbered per pair and do not count).
func (e *Engine) Seq() uint64 { return e.seq.Load() }

// SetObserver installs o (nil: none). Set it before the first call; with
// none the engine does no work for it.
func (e *Engine) SetObserver(o Observer) { e.obs.obs = o }

// Rank and Size describe the communicator.
func (e *Engine) Rank() int { return e.rank }
func (e *Engine) Size() int { return e.sz }

// run executes one collective: it numbers the call, runs the algorithm,
// waits for everything it posted, and wraps any error with this rank and
// the call's description.
func (e *Engine) run(ctx context.Context, h header, body func(c *call) error) error {
	if e.failed != nil {
		return fmt.Errorf("rank %d: %s: engine failed earlier: %w", e.rank, h, e.failed)
	}
	h.seq = e.seq.Add(1)
	start := e.obs.start(h, 0)
	c := &call{e: e, ctx: ctx, h: h, rank: e.rank, size: e.sz, es: 1}
	if h.dt != noField {
		c.es = h.dt.Size()
	}
	var err error
	if ctx.Err() != nil {
		err = fabric.CtxErr(ctx)
	} else {
		err = body(c)
	}
	if err == nil {
		err = c.waitAll()
	} else if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// keep both: what failed and that the context had ended
		err = fmt.Errorf("%w (context ended: %v)", err, ctx.Err())
	}
	c.release()
	if err != nil {
		err = fmt.Errorf("rank %d: %s: %w", e.rank, c.h, err)
		e.failed = err
	}
	e.obs.end(h, 0, start, err)
	return err
}

// argErr reports an invalid call. Nothing was sent, the call is not
// numbered, and the engine stays usable.
func (e *Engine) argErr(h header, format string, a ...any) error {
	h.seq = e.seq.Load() + 1
	return fmt.Errorf("rank %d: %s: %s", e.rank, h, fmt.Sprintf(format, a...))
}

// checkCommon validates what every collective shares.
func (e *Engine) checkCommon(h header, count int) error {
	switch {
	case e.cfgErr != nil:
		return e.argErr(h, "config: %v", e.cfgErr)
	case count < 0 || int64(count) > maxCount:
		return e.argErr(h, "count %d out of range", count)
	case h.dt != noField && !h.dt.Valid():
		return e.argErr(h, "unknown dtype %d", uint8(h.dt))
	case h.op != noField && !h.op.Valid():
		return e.argErr(h, "unknown op %d", uint8(h.op))
	case h.root != noRoot && (h.root < 0 || h.root >= e.sz || h.root > maxRoot):
		return e.argErr(h, "root %d outside [0,%d)", h.root, e.sz)
	}
	return nil
}

// need checks that b holds at least n bytes and returns its first n.
func (e *Engine) need(h header, b Buffer, n int, what string) (Buffer, error) {
	if b == nil && n == 0 {
		return HostBuffer(nil), nil // NCCL allows null buffers for count 0
	}
	if b == nil {
		return nil, e.argErr(h, "%s buffer is nil, need %d bytes", what, n)
	}
	if b.Len() < n {
		return nil, e.argErr(h, "%s buffer has %d bytes, need %d", what, b.Len(), n)
	}
	return mem.Prefix(b, n), nil
}

// sameMemory reports whether a and b are the same range of memory.
func sameMemory(a, b Buffer) bool {
	if a == nil || b == nil || a.Len() != b.Len() {
		return false
	}
	if aa, ok := a.(Addresser); ok {
		if ba, ok := b.(Addresser); ok {
			return aa.Addr() == ba.Addr()
		}
		return false
	}
	ta, tb := fmt.Sprintf("%T", a), fmt.Sprintf("%T", b)
	if ta != tb {
		return false
	}
	defer func() { _ = recover() }() // uncomparable dynamic type: not provably the same
	return a == b
}

// samePrefix reports whether a starts with b: the "same buffer" in-place
// form (a may be longer than b).
func samePrefix(a, b Buffer) bool {
	return a != nil && b != nil && a.Len() >= b.Len() && sameMemory(mem.Prefix(a, b.Len()), b)
}

// overlap reports whether a and b share bytes (false when unknown).
func overlap(a, b Buffer) bool {
	aa, ok1 := a.(Addresser)
	ba, ok2 := b.(Addresser)
	if !ok1 || !ok2 || a.Len() == 0 || b.Len() == 0 {
		return false
	}
	x, y := aa.Addr(), ba.Addr()
	return x < y+uintptr(b.Len()) && y < x+uintptr(a.Len())
}

func describeArgs(kind kind, dt dtype.DType, op dtype.Op, count, root int) header {
	return header{kind: kind, dt: dt, op: op, count: int64(count), root: root}
}
