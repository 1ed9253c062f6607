package collectives

import (
	"context"
	"errors"

	"github.com/flexlink/flexlink/dtype"
)

// The collective entry points. Counts are in elements; buffers may be
// longer than needed (the first bytes are used). NCCL's in-place forms are
// recognised for buffers that implement Addresser (HostBuffer does): they
// are named on each method; send and recv that overlap in any other way
// are rejected.

// AllReduce sets recv on every rank to the element-wise reduction with op
// of every rank's send (count elements of dt). In place: send and recv are
// the same memory. Every rank gets bit-identical results.
//
// Algorithm: ring reduce-scatter + allgather, pipelined in chunks, for
// messages of at least Config.Threshold bytes (by host where
// Config.Hosts allows: allReduceHier); recursive doubling below.
func (e *Engine) AllReduce(ctx context.Context, send, recv Buffer, count int, dt dtype.DType, op dtype.Op) error {
	h := describeArgs(kindAllReduce, dt, op, count, noRoot)
	large := algoRing
	if e.hier != nil {
		large = algoHier
	}
	return e.collective(ctx, h, algoRD, large, e.sameSize(h, send, recv, 1), func(c *call, o operands) error {
		switch c.h.algo {
		case algoRD:
			return allReduceRD(c, o.send, o.recv, count, o.inPlace)
		case algoHier:
			return allReduceHier(c, o.send, o.recv, count, o.inPlace)
		}
		return allReduceRing(c, o.send, o.recv, count, o.inPlace)
	})
}

// AllGather sets recv on every rank to the concatenation, in rank order,
// of every rank's send (sendCount elements each; recv holds
// Size()*sendCount). In place: send is recv's slot of this rank
// (recv.Slice(rank*sendCount*size, ...)), or send is recv itself (same
// start and length), meaning the same.
//
// Algorithm: ring, pipelined in chunks.
func (e *Engine) AllGather(ctx context.Context, send, recv Buffer, sendCount int, dt dtype.DType) error {
	h := describeArgs(kindAllGather, dt, noField, sendCount, noRoot)
	bufs := func(n int) (operands, error) {
		recv, mine, send, inPlace, err := e.needSlot(h, recv, send, n, "recv", "send", "slot")
		return operands{send: send, recv: recv, from: send, to: mine, inPlace: inPlace}, err
	}
	return e.collective(ctx, h, algoRing, algoRing, bufs, func(c *call, o operands) error {
		if o.inPlace {
			return allGatherRing(c, o.recv, nil, sendCount)
		}
		if o.from.Len() < copyAsideBytes { // not worth a goroutine
			if err := o.local(c); err != nil {
				return err
			}
			return allGatherRing(c, o.recv, nil, sendCount)
		}
		// Out of place the own block's copy into recv runs beside the
		// ring, which sends it from send (single-copy links pull in
		// goroutines of their own: the copy fills this one's wait).
		copied := make(chan error, 1)
		go func() { copied <- o.local(c) }()
		err := allGatherRing(c, o.recv, o.send, sendCount)
		return errors.Join(err, <-copied)
	})
}

// copyAsideBytes: an out-of-place allgather's own block of at least this
// many bytes is copied into recv beside the ring, not before it.
const copyAsideBytes = 256 << 10

// ReduceScatter reduces every rank's send (Size()*recvCount elements) with
// op and leaves block r of the result (recvCount elements) in rank r's
// recv. In place: recv is this rank's block of send
// (send.Slice(rank*recvCount*size, ...)), or recv is send itself, in which
// case the result is written to that block. Other blocks of send are not
// modified.
//
// Algorithm: ring, pipelined in chunks.
func (e *Engine) ReduceScatter(ctx context.Context, send, recv Buffer, recvCount int, dt dtype.DType, op dtype.Op) error {
	h := describeArgs(kindReduceScatter, dt, op, recvCount, noRoot)
	bufs := func(n int) (operands, error) {
		send, mine, recv, inPlace, err := e.needSlot(h, send, recv, n, "send", "recv", "block")
		return operands{send: send, recv: recv, from: mine, to: recv, inPlace: inPlace}, err
	}
	return e.collective(ctx, h, algoRing, algoRing, bufs, func(c *call, o operands) error {
		return reduceScatterRing(c, o.send, o.recv, recvCount, o.inPlace)
	})
}

// Broadcast copies root's send (count elements) into every rank's recv,
// root's included. send is read on root only (it may be nil elsewhere). In
// place: send and recv are the same memory on root.
//
// Algorithm: binomial tree below Config.Threshold bytes, pipelined chain at
// or above.
func (e *Engine) Broadcast(ctx context.Context, send, recv Buffer, count int, dt dtype.DType, root int) error {
	h := describeArgs(kindBroadcast, dt, noField, count, root)
	return e.collective(ctx, h, algoTree, algoChain, e.rooted(h, send, recv, "recv"), func(c *call, o operands) error {
		if e.rank == root {
			if err := o.local(c); err != nil {
				return err
			}
		}
		c.guard() // the root only sends
		if c.h.algo == algoTree {
			return broadcastTree(c, o.recv, count)
		}
		return broadcastChain(c, o.recv, count)
	})
}

// Reduce reduces every rank's send (count elements) with op into root's
// recv. recv is written on root only (it may be nil elsewhere). In place:
// send and recv are the same memory on root.
//
// Algorithm: binomial tree below Config.Threshold bytes, pipelined chain at
// or above.
func (e *Engine) Reduce(ctx context.Context, send, recv Buffer, count int, dt dtype.DType, op dtype.Op, root int) error {
	h := describeArgs(kindReduce, dt, op, count, root)
	return e.collective(ctx, h, algoTree, algoChain, e.rooted(h, send, recv, "send"), func(c *call, o operands) error {
		c.guard() // the leaves only send
		if c.h.algo == algoTree {
			return reduceTree(c, o.send, o.recv, count, o.inPlace)
		}
		return reduceChain(c, o.send, o.recv, count, o.inPlace)
	})
}

// AllToAll sends block p of every rank's send (count elements per block,
// Size() blocks) to rank p, which stores it as block r of its recv for
// sender r. In place: send and recv are the same memory.
//
// Algorithm: pairwise exchange, pipelined in chunks.
func (e *Engine) AllToAll(ctx context.Context, send, recv Buffer, count int, dt dtype.DType) error {
	h := describeArgs(kindAllToAll, dt, noField, count, noRoot)
	return e.collective(ctx, h, algoPairwise, algoPairwise, e.sameSize(h, send, recv, e.sz), func(c *call, o operands) error {
		return allToAllPairwise(c, o.send, o.recv, count, o.inPlace)
	})
}

// Barrier returns once every rank has entered it.
//
// Algorithm: dissemination (ceil(log2 Size) rounds of empty messages).
func (e *Engine) Barrier(ctx context.Context) error {
	h := describeArgs(kindBarrier, noField, noField, 0, noRoot)
	if err := e.checkCommon(h, 0); err != nil {
		return err
	}
	h.algo = e.pick(false, algoDissem)
	return e.run(ctx, h, func(c *call) error {
		if h.algo == algoLocal {
			return nil
		}
		return c.barrier()
	})
}
