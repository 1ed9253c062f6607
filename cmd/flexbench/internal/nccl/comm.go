package nccl

import (
	"fmt"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/internal/errs"
)

// Comm is one rank's NCCL communicator. Get it from Lib.InitRank or
// InitRankOn; Destroy it when done.
//
// Buffers are device addresses (gpu.Buffer.Ptr) on the communicator's
// device, streams are cudaStream_t / CUstream values (0: the legacy default
// stream). Collective methods return once NCCL has enqueued the work on the
// stream: the buffers must stay allocated, and unmodified by anything not
// ordered on that stream, until the stream has passed it. Counts are in
// elements of dt.
//
// Every method runs its NCCL calls inside the Runner given to InitRankOn.
// A Comm is not safe for concurrent use (neither is an ncclComm_t): use it
// from one goroutine at a time. Errors name the rank and wrap *Error.
type Comm struct {
	api    api
	h      commHandle
	n      int
	rank   int
	run    Runner
	closed bool
}

// Size is the number of ranks.
func (c *Comm) Size() int { return c.n }

// Rank is this communicator's rank.
func (c *Comm) Rank() int { return c.rank }

// do runs f in the Runner and names the rank in its error. After Destroy it
// fails with errs.ErrClosed without calling NCCL.
func (c *Comm) do(f func() error) error {
	if c.closed {
		return fmt.Errorf("nccl rank %d of %d: communicator %w", c.rank, c.n, errs.ErrClosed)
	}
	if err := c.run(f); err != nil {
		return fmt.Errorf("nccl rank %d of %d: %w", c.rank, c.n, err)
	}
	return nil
}

// fail is a rejected argument, named like do's errors.
func (c *Comm) fail(fn string, err error) error {
	return fmt.Errorf("nccl rank %d of %d: %s: %w", c.rank, c.n, fn, err)
}

// check is the package check for this communicator.
func (c *Comm) check(fn string, r Result) error { return check(c.api, fn, r, c.h) }

// operands validates a count, element type and, when op is non-nil, a
// reduction, and maps them to NCCL's values.
func operands(count int, dt dtype.DType, op *dtype.Op) (uint64, dataType, redOp, error) {
	if count < 0 {
		return 0, 0, 0, fmt.Errorf("negative count %d", count)
	}
	t, err := ncclType(dt)
	if err != nil {
		return 0, 0, 0, err
	}
	var o redOp
	if op != nil {
		if o, err = ncclOp(*op); err != nil {
			return 0, 0, 0, err
		}
	}
	return uint64(count), t, o, nil
}

// inRange checks a root or peer rank.
func (c *Comm) inRange(what string, r int) error {
	if r < 0 || r >= c.n {
		return fmt.Errorf("%s %d out of range [0, %d)", what, r, c.n)
	}
	return nil
}

// AllReduce reduces count elements of send over all ranks into recv on every
// rank (send == recv: in place).
func (c *Comm) AllReduce(send, recv uintptr, count int, dt dtype.DType, op dtype.Op, stream uintptr) error {
	const fn = "ncclAllReduce"
	n, t, o, err := operands(count, dt, &op)
	if err != nil {
		return c.fail(fn, err)
	}
	return c.do(func() error { return c.check(fn, c.api.allReduce(send, recv, n, t, o, c.h, stream)) })
}

// AllGather gathers sendCount elements from every rank into recv, rank i's at
// element offset i*sendCount (recv holds Size()*sendCount elements).
func (c *Comm) AllGather(send, recv uintptr, sendCount int, dt dtype.DType, stream uintptr) error {
	const fn = "ncclAllGather"
	n, t, _, err := operands(sendCount, dt, nil)
	if err != nil {
		return c.fail(fn, err)
	}
	return c.do(func() error { return c.check(fn, c.api.allGather(send, recv, n, t, c.h, stream)) })
}

// ReduceScatter reduces Size()*recvCount elements of send over all ranks and
// leaves block i (recvCount elements) of the result in rank i's recv.
func (c *Comm) ReduceScatter(send, recv uintptr, recvCount int, dt dtype.DType, op dtype.Op, stream uintptr) error {
	const fn = "ncclReduceScatter"
	n, t, o, err := operands(recvCount, dt, &op)
	if err != nil {
		return c.fail(fn, err)
	}
	return c.do(func() error { return c.check(fn, c.api.reduceScatter(send, recv, n, t, o, c.h, stream)) })
}

// Broadcast copies count elements of root's send into recv on every rank.
func (c *Comm) Broadcast(send, recv uintptr, count int, dt dtype.DType, root int, stream uintptr) error {
	const fn = "ncclBroadcast"
	n, t, _, err := operands(count, dt, nil)
	if err == nil {
		err = c.inRange("root", root)
	}
	if err != nil {
		return c.fail(fn, err)
	}
	return c.do(func() error { return c.check(fn, c.api.broadcast(send, recv, n, t, root, c.h, stream)) })
}

// Reduce reduces count elements of send over all ranks into root's recv
// (other ranks' recv is not written).
func (c *Comm) Reduce(send, recv uintptr, count int, dt dtype.DType, op dtype.Op, root int, stream uintptr) error {
	const fn = "ncclReduce"
	n, t, o, err := operands(count, dt, &op)
	if err == nil {
		err = c.inRange("root", root)
	}
	if err != nil {
		return c.fail(fn, err)
	}
	return c.do(func() error { return c.check(fn, c.api.reduce(send, recv, n, t, o, root, c.h, stream)) })
}

// Destroy frees the communicator (ncclCommDestroy). Synchronize the streams
// that carry its work first. The Comm is unusable afterwards, even when Destroy fails;
// a second Destroy returns an error wrapping errs.ErrClosed.
func (c *Comm) Destroy() error {
	err := c.do(func() error { return c.check("ncclCommDestroy", c.api.commDestroy(c.h)) })
	c.closed = true
	return err
}
