package nccl

import (
	"runtime"

	"github.com/flexlink/flexlink/dtype"
)

// Point-to-point calls and groups.
//
// NCCL keeps group state per OS thread: ncclGroupStart raises the calling
// thread's group depth, and the NCCL calls that thread makes until the
// matching ncclGroupEnd are only recorded, then launched together by
// ncclGroupEnd. A Send and its matching Recv on two ranks must be in one
// group on each side when they depend on each other (an exchange), or both
// sides block in the kernel.

// Send sends count elements of buf to rank peer, which must Recv the same
// count and type from this rank.
func (c *Comm) Send(buf uintptr, count int, dt dtype.DType, peer int, stream uintptr) error {
	const fn = "ncclSend"
	n, t, _, err := operands(count, dt, nil)
	if err == nil {
		err = c.inRange("peer", peer)
	}
	if err != nil {
		return c.fail(fn, err)
	}
	return c.do(func() error { return c.check(fn, c.api.send(buf, n, t, peer, c.h, stream)) })
}

// Recv receives count elements from rank peer into buf.
func (c *Comm) Recv(buf uintptr, count int, dt dtype.DType, peer int, stream uintptr) error {
	const fn = "ncclRecv"
	n, t, _, err := operands(count, dt, nil)
	if err == nil {
		err = c.inRange("peer", peer)
	}
	if err != nil {
		return c.fail(fn, err)
	}
	return c.do(func() error { return c.check(fn, c.api.recv(buf, n, t, peer, c.h, stream)) })
}

// GroupStart opens an NCCL group (ncclGroupStart) on the calling OS thread.
// The caller must hold runtime.LockOSThread from GroupStart until the
// matching GroupEnd and make every call of the group on that goroutine;
// Group does all of this.
func (c *Comm) GroupStart() error {
	return c.do(func() error { return c.check("ncclGroupStart", c.api.groupStart()) })
}

// GroupEnd closes the group GroupStart opened and launches its work
// (ncclGroupEnd). It returns once the work is enqueued.
func (c *Comm) GroupEnd() error {
	return c.do(func() error { return c.check("ncclGroupEnd", c.api.groupEnd()) })
}

// Group runs f, which makes NCCL calls (on this or other communicators of
// the process), as one NCCL group: it locks the goroutine to its thread,
// calls GroupStart, f and GroupEnd, and returns f's error or else
// GroupEnd's. GroupEnd is called even when f fails, so the thread's group
// is always closed.
func (c *Comm) Group(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.GroupStart(); err != nil {
		return err
	}
	ferr := f()
	if err := c.GroupEnd(); ferr == nil {
		return err
	}
	return ferr
}

// AllToAll sends block j of send (countPerPeer elements at element offset
// j*countPerPeer) to rank j, which stores it as block i of its recv, where i
// is this rank. It is one group of Size() ncclSend/ncclRecv pairs, made
// inside a single Runner call (so on one thread): ncclAlltoAll exists only
// in recent NCCL versions, point-to-point calls since 2.7.
func (c *Comm) AllToAll(send, recv uintptr, countPerPeer int, dt dtype.DType, stream uintptr) error {
	n, t, _, err := operands(countPerPeer, dt, nil)
	if err != nil {
		return c.fail("alltoall", err)
	}
	block := uintptr(countPerPeer) * uintptr(dt.Size()) // bytes per peer
	return c.do(func() error {
		if err := c.check("ncclGroupStart", c.api.groupStart()); err != nil {
			return err
		}
		var first error
		for p := 0; p < c.n && first == nil; p++ {
			off := uintptr(p) * block
			first = c.check("ncclSend", c.api.send(send+off, n, t, p, c.h, stream))
			if first == nil {
				first = c.check("ncclRecv", c.api.recv(recv+off, n, t, p, c.h, stream))
			}
		}
		// Close the group even after a failure: the thread's group depth
		// must return to zero.
		if err := c.check("ncclGroupEnd", c.api.groupEnd()); first == nil {
			first = err
		}
		return first
	})
}
