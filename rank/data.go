package rank

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/mem"
)

// Data is a buffer with its element type and count, like NCCL's
// (pointer, count, datatype). Make one with Of, Half, BFloat16 or Bytes for
// host memory; GPU buffers come from package gpu.
type Data struct {
	Buf   collectives.Buffer
	Count int
	Type  dtype.DType
}

// Elem is a Go element type with a flexlink dtype.
type Elem interface {
	~int8 | ~uint8 | ~int32 | ~int64 | ~float32 | ~float64
}

// Of wraps a host slice. It shares memory with s.
func Of[T Elem](s []T) Data {
	var z T
	var dt dtype.DType
	switch any(z).(type) {
	case int8:
		dt = dtype.Int8
	case uint8:
		dt = dtype.Uint8
	case int32:
		dt = dtype.Int32
	case int64:
		dt = dtype.Int64
	case float32:
		dt = dtype.Float32
	case float64:
		dt = dtype.Float64
	default:
		// ~T of a named type: fall back on the size and kind.
		panic(fmt.Sprintf("rank.Of: unsupported element type %T", z))
	}
	n := len(s) * int(unsafe.Sizeof(z))
	var b []byte
	if n > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), n)
	}
	return Data{Buf: collectives.HostBuffer(b), Count: len(s), Type: dt}
}

// Half wraps IEEE float16 values held as uint16 bits.
func Half(s []uint16) Data { return u16(s, dtype.Float16) }

// BFloat16 wraps bfloat16 values held as uint16 bits.
func BFloat16(s []uint16) Data { return u16(s, dtype.BFloat16) }

func u16(s []uint16, dt dtype.DType) Data {
	var b []byte
	if len(s) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 2*len(s))
	}
	return Data{Buf: collectives.HostBuffer(b), Count: len(s), Type: dt}
}

// Bytes wraps raw host bytes holding elements of type dt.
func Bytes(b []byte, dt dtype.DType) Data {
	if dt.Size() == 0 {
		return Data{Buf: collectives.HostBuffer(b), Type: dt}
	}
	return Data{Buf: collectives.HostBuffer(b), Count: len(b) / dt.Size(), Type: dt}
}

func (d Data) check(what string, wantCount int) error {
	if !d.Type.Valid() {
		return fmt.Errorf("%s: invalid dtype %v", what, d.Type)
	}
	if d.Count < 0 || d.Buf == nil && d.Count > 0 {
		return fmt.Errorf("%s: invalid buffer (count %d)", what, d.Count)
	}
	if wantCount >= 0 && d.Count != wantCount {
		return fmt.Errorf("%s: count %d, want %d", what, d.Count, wantCount)
	}
	if d.Buf != nil && d.Buf.Len() < d.Count*d.Type.Size() {
		return fmt.Errorf("%s: buffer holds %d bytes, %d %v need %d", what, d.Buf.Len(), d.Count, d.Type, d.Count*d.Type.Size())
	}
	return nil
}

func (d Data) buf() collectives.Buffer {
	if d.Buf == nil {
		return collectives.HostBuffer(nil)
	}
	return mem.Prefix(d.Buf, d.Count*d.Type.Size())
}

func sameType(a, b Data) error {
	if a.Type != b.Type {
		return fmt.Errorf("send is %v but recv is %v", a.Type, b.Type)
	}
	return nil
}

// AllReduce combines send from every rank with op and leaves the result in
// recv on every rank. send and recv may be the same buffer (in place).
func (c *Comm) AllReduce(ctx context.Context, send, recv Data, op dtype.Op) error {
	if err := firstErr(send.check("allreduce send", -1), recv.check("allreduce recv", send.Count), sameType(send, recv)); err != nil {
		return err
	}
	return c.c.Run(ctx, "allreduce", func(ctx context.Context) error {
		return c.c.Engine().AllReduce(ctx, send.buf(), recv.buf(), send.Count, send.Type, op)
	})
}

// AllGather concatenates every rank's send, in rank order, into recv
// (Size()*send.Count elements).
func (c *Comm) AllGather(ctx context.Context, send, recv Data) error {
	if err := firstErr(send.check("allgather send", -1), recv.check("allgather recv", send.Count*c.c.Size()), sameType(send, recv)); err != nil {
		return err
	}
	return c.c.Run(ctx, "allgather", func(ctx context.Context) error {
		return c.c.Engine().AllGather(ctx, send.buf(), recv.buf(), send.Count, send.Type)
	})
}

// ReduceScatter reduces send (Size()*recv.Count elements) across ranks and
// leaves block Rank() of the result in recv.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv Data, op dtype.Op) error {
	if err := firstErr(recv.check("reducescatter recv", -1), send.check("reducescatter send", recv.Count*c.c.Size()), sameType(send, recv)); err != nil {
		return err
	}
	return c.c.Run(ctx, "reducescatter", func(ctx context.Context) error {
		return c.c.Engine().ReduceScatter(ctx, send.buf(), recv.buf(), recv.Count, recv.Type, op)
	})
}

// Broadcast copies root's send into every rank's recv. send is only read
// on root (elsewhere it may be empty).
func (c *Comm) Broadcast(ctx context.Context, send, recv Data, root int) error {
	if err := firstErr(c.c.CheckRoot(root), recv.check("broadcast recv", -1)); err != nil {
		return err
	}
	if c.c.Rank() == root {
		if err := firstErr(send.check("broadcast send", recv.Count), sameType(send, recv)); err != nil {
			return err
		}
	} else {
		send = recv
	}
	return c.c.Run(ctx, "broadcast", func(ctx context.Context) error {
		return c.c.Engine().Broadcast(ctx, send.buf(), recv.buf(), recv.Count, recv.Type, root)
	})
}

// Reduce combines send from every rank with op into root's recv. recv is
// only written on root (elsewhere it may be empty).
func (c *Comm) Reduce(ctx context.Context, send, recv Data, op dtype.Op, root int) error {
	if err := firstErr(c.c.CheckRoot(root), send.check("reduce send", -1)); err != nil {
		return err
	}
	if c.c.Rank() == root {
		if err := firstErr(recv.check("reduce recv", send.Count), sameType(send, recv)); err != nil {
			return err
		}
	} else if recv.Buf == nil {
		recv = send
	}
	return c.c.Run(ctx, "reduce", func(ctx context.Context) error {
		return c.c.Engine().Reduce(ctx, send.buf(), recv.buf(), send.Count, send.Type, op, root)
	})
}

// AllToAll sends block j of send (send.Count/Size() elements) to rank j,
// which stores it as block Rank() of its recv. send.Count must be a
// multiple of Size(), and recv holds as many elements. With FLEXLINK_PXN
// set, blocks for other hosts follow the PXN routes (docs/PXN.md).
func (c *Comm) AllToAll(ctx context.Context, send, recv Data) error {
	if err := firstErr(send.check("alltoall send", -1), recv.check("alltoall recv", send.Count), sameType(send, recv)); err != nil {
		return err
	}
	if send.Count%c.c.Size() != 0 {
		return fmt.Errorf("alltoall: count %d is not a multiple of the communicator size %d", send.Count, c.c.Size())
	}
	return c.c.Run(ctx, "alltoall", func(ctx context.Context) error {
		blk := make([]int, c.c.Size())
		for i := range blk {
			blk[i] = send.Count / c.c.Size() * send.Type.Size()
		}
		if ok, err := c.pxnAllToAll(ctx, send.buf(), recv.buf(), blk, blk); ok { // FLEXLINK_PXN (alltoallv.go)
			return err
		}
		return c.c.Engine().AllToAll(ctx, send.buf(), recv.buf(), send.Count/c.c.Size(), send.Type)
	})
}

// P2P is one send or receive of a Group.
type P2P struct {
	Send bool
	Peer int
	Data Data
}

// SendTo makes a send of d to peer, a P2P entry of a Group.
func SendTo(peer int, d Data) P2P { return P2P{Send: true, Peer: peer, Data: d} }

// RecvFrom makes a receive into d from peer, a P2P entry of a Group.
func RecvFrom(peer int, d Data) P2P { return P2P{Send: false, Peer: peer, Data: d} }

// Group issues sends and receives together (like ncclGroupStart/End around
// ncclSend/ncclRecv), so a ring exchange cannot deadlock. Messages between a
// pair are matched in order; sizes must agree. With FLEXLINK_PXN set and
// FLEXLINK_PXN_GROUP=1, messages for ranks on other hosts follow the PXN
// routes: one this rank's NIC is not on the destination's rail for is
// handed over shm to the local rank whose NIC is (docs/PXN.md).
func (c *Comm) Group(ctx context.Context, ops ...P2P) error {
	ps := make([]collectives.P2P, len(ops))
	for i, o := range ops {
		if err := firstErr(c.c.CheckPeer(o.Peer), o.Data.check("group entry", -1)); err != nil {
			return fmt.Errorf("group entry %d: %w", i, err)
		}
		ps[i] = collectives.P2P{Send: o.Send, Peer: o.Peer, Buf: o.Data.buf()}
	}
	unaliasSends(ps)
	return c.c.Run(ctx, "group send/recv", func(ctx context.Context) error {
		return c.c.PXNGroup(ctx, ps)
	})
}

// Send sends d to peer (a Group of one); peer's matching Recv must have
// the same size.
func (c *Comm) Send(ctx context.Context, d Data, peer int) error {
	return c.Group(ctx, SendTo(peer, d))
}

// Recv receives into d from peer (a Group of one).
func (c *Comm) Recv(ctx context.Context, d Data, peer int) error {
	return c.Group(ctx, RecvFrom(peer, d))
}

// Barrier returns once every rank of the communicator has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.c.Run(ctx, "barrier", c.c.Engine().Barrier)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// unaliasSends gives every send of a group that overlaps a receive of the
// same group a private copy, so that an in-place exchange (the same buffer
// sent and received, as in a ring shift) cannot overwrite bytes before they
// are sent. NCCL leaves this undefined; it costs one copy and never corrupts.
func unaliasSends(ps []collectives.P2P) {
	for i, s := range ps {
		sb, ok := s.Buf.(collectives.HostBuffer)
		if !s.Send || !ok || len(sb) == 0 {
			continue
		}
		for _, r := range ps {
			rb, ok := r.Buf.(collectives.HostBuffer)
			if r.Send || !ok || len(rb) == 0 {
				continue
			}
			if sb.Addr() < rb.Addr()+uintptr(len(rb)) && rb.Addr() < sb.Addr()+uintptr(len(sb)) {
				ps[i].Buf = collectives.HostBuffer(append([]byte(nil), sb...))
				break
			}
		}
	}
}
