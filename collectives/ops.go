package collectives

import (
	"context"

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
// messages of at least Config.Threshold bytes; recursive doubling below.
func (e *Engine) AllReduce(ctx context.Context, send, recv Buffer, count int, dt dtype.DType, op dtype.Op) error {
	h := describeArgs(kindAllReduce, dt, op, count, noRoot)
	if err := e.checkCommon(h, count); err != nil {
		return err
	}
	n := count * dt.Size()
	send, err := e.need(h, send, n, "send")
	if err != nil {
		return err
	}
	if recv, err = e.need(h, recv, n, "recv"); err != nil {
		return err
	}
	inPlace := sameMemory(send, recv)
	if !inPlace && overlap(send, recv) {
		return e.argErr(h, "send and recv overlap without being the same memory")
	}
	switch {
	case e.sz == 1:
		h.algo = algoLocal
	case count == 0:
		h.algo = algoHeader
	case e.cfg.latency(n):
		h.algo = algoRD
	default:
		h.algo = algoRing
	}
	return e.run(ctx, h, func(c *call) error {
		switch h.algo {
		case algoLocal:
			return localCopy(c, send, recv, inPlace, true)
		case algoHeader:
			return c.headerRing()
		case algoRD:
			return allReduceRD(c, send, recv, count, inPlace)
		}
		return allReduceRing(c, send, recv, count, inPlace)
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
	if err := e.checkCommon(h, sendCount); err != nil {
		return err
	}
	n := sendCount * dt.Size()
	recv, err := e.need(h, recv, n*e.sz, "recv")
	if err != nil {
		return err
	}
	mine := recv.Slice(e.rank*n, n)
	inPlace := samePrefix(send, recv)
	if !inPlace {
		if send, err = e.need(h, send, n, "send"); err != nil {
			return err
		}
		inPlace = sameMemory(send, mine)
		if !inPlace && overlap(send, recv) {
			return e.argErr(h, "send overlaps recv without being this rank's slot of it")
		}
	}
	h.algo = e.pick(sendCount == 0, algoRing)
	return e.run(ctx, h, func(c *call) error {
		if !inPlace {
			if err := c.copyBuf(mine, send.Slice(0, n)); err != nil {
				return err
			}
		}
		switch h.algo {
		case algoLocal:
			return nil
		case algoHeader:
			return c.headerRing()
		}
		return allGatherRing(c, recv, sendCount)
	})
}

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
	if err := e.checkCommon(h, recvCount); err != nil {
		return err
	}
	n := recvCount * dt.Size()
	send, err := e.need(h, send, n*e.sz, "send")
	if err != nil {
		return err
	}
	mine := send.Slice(e.rank*n, n)
	inPlace := samePrefix(recv, send)
	if inPlace {
		recv = mine
	} else {
		if recv, err = e.need(h, recv, n, "recv"); err != nil {
			return err
		}
		inPlace = sameMemory(recv, mine)
		if !inPlace && overlap(send, recv) {
			return e.argErr(h, "recv overlaps send without being this rank's block of it")
		}
	}
	h.algo = e.pick(recvCount == 0, algoRing)
	return e.run(ctx, h, func(c *call) error {
		switch h.algo {
		case algoLocal:
			return localCopy(c, mine, recv, inPlace, true)
		case algoHeader:
			return c.headerRing()
		}
		return reduceScatterRing(c, send, recv, recvCount, inPlace)
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
	if err := e.checkCommon(h, count); err != nil {
		return err
	}
	n := count * dt.Size()
	recv, err := e.need(h, recv, n, "recv")
	if err != nil {
		return err
	}
	inPlace := true
	if e.rank == root {
		if send, err = e.need(h, send, n, "send"); err != nil {
			return err
		}
		inPlace = sameMemory(send, recv)
		if !inPlace && overlap(send, recv) {
			return e.argErr(h, "send and recv overlap without being the same memory")
		}
	}
	h.algo = e.pick(count == 0, e.treeOrChain(n))
	return e.run(ctx, h, func(c *call) error {
		if e.rank == root && !inPlace {
			if err := c.copyBuf(recv, send); err != nil {
				return err
			}
		}
		switch h.algo {
		case algoLocal:
			return nil
		case algoHeader:
			return c.headerRing()
		}
		c.guard() // the root only sends
		if h.algo == algoTree {
			return broadcastTree(c, recv, count)
		}
		return broadcastChain(c, recv, count)
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
	if err := e.checkCommon(h, count); err != nil {
		return err
	}
	n := count * dt.Size()
	send, err := e.need(h, send, n, "send")
	if err != nil {
		return err
	}
	inPlace := false
	if e.rank == root {
		if recv, err = e.need(h, recv, n, "recv"); err != nil {
			return err
		}
		inPlace = sameMemory(send, recv)
		if !inPlace && overlap(send, recv) {
			return e.argErr(h, "send and recv overlap without being the same memory")
		}
	}
	h.algo = e.pick(count == 0, e.treeOrChain(n))
	return e.run(ctx, h, func(c *call) error {
		switch h.algo {
		case algoLocal:
			return localCopy(c, send, recv, inPlace, true)
		case algoHeader:
			return c.headerRing()
		}
		c.guard() // the leaves only send
		if h.algo == algoTree {
			return reduceTree(c, send, recv, count, inPlace)
		}
		return reduceChain(c, send, recv, count, inPlace)
	})
}

// AllToAll sends block p of every rank's send (count elements per block,
// Size() blocks) to rank p, which stores it as block r of its recv for
// sender r. In place: send and recv are the same memory.
//
// Algorithm: pairwise exchange, pipelined in chunks.
func (e *Engine) AllToAll(ctx context.Context, send, recv Buffer, count int, dt dtype.DType) error {
	h := describeArgs(kindAllToAll, dt, noField, count, noRoot)
	if err := e.checkCommon(h, count); err != nil {
		return err
	}
	n := count * dt.Size()
	send, err := e.need(h, send, n*e.sz, "send")
	if err != nil {
		return err
	}
	if recv, err = e.need(h, recv, n*e.sz, "recv"); err != nil {
		return err
	}
	inPlace := sameMemory(send, recv)
	if !inPlace && overlap(send, recv) {
		return e.argErr(h, "send and recv overlap without being the same memory")
	}
	h.algo = e.pick(count == 0, algoPairwise)
	return e.run(ctx, h, func(c *call) error {
		switch h.algo {
		case algoLocal:
			return localCopy(c, send, recv, inPlace, false)
		case algoHeader:
			return c.headerRing()
		}
		return allToAllPairwise(c, send, recv, count, inPlace)
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

// pick returns the algorithm for a call: local on one rank, the header
// exchange for count 0, else alg.
func (e *Engine) pick(zero bool, alg algo) algo {
	switch {
	case e.sz == 1:
		return algoLocal
	case zero:
		return algoHeader
	}
	return alg
}

func (e *Engine) treeOrChain(n int) algo {
	if e.cfg.latency(n) {
		return algoTree
	}
	return algoChain
}

// local is a collective on one rank: copy (and finish) send into recv.
func localCopy(c *call, send, recv Buffer, inPlace, finish bool) error {
	if !inPlace {
		if err := c.copyBuf(recv, send); err != nil {
			return err
		}
	}
	if finish && c.h.op != noField {
		return c.finish(recv)
	}
	return nil
}
