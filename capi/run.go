package capi

import (
	"context"
	"fmt"
	"unsafe"

	"flexlink/dtype"
	"flexlink/gpu"
	"flexlink/rank"
)

// p2p is one send or receive of a group, from a Send, Recv, Gather or
// Scatter call.
type p2p struct {
	send  bool
	peer  int
	ptr   unsafe.Pointer
	bytes int
	w     *work
}

// runAll runs one communicator's works in order: consecutive point-to-point
// entries (Send, Recv, Gather, Scatter) go together into one group, so
// pairs of ranks that send to each other do not deadlock.
func (c *Comm) runAll(ws []*work) error {
	var pending []p2p
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		ps := pending
		pending = nil
		return c.runP2P(ps)
	}
	for _, w := range ws {
		if ps := w.p2ps(); ps != nil {
			if len(pending) > 0 && pending[0].w.device != w.device {
				if err := flush(); err != nil {
					return err
				}
			}
			pending = append(pending, ps...)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if err := c.runColl(w); err != nil {
			return err
		}
	}
	return flush()
}

// p2ps lists the sends and receives of a point-to-point call (nil for a
// collective).
func (w *work) p2ps() []p2p {
	k, me, n := w.call.Kind, w.c.rank, w.c.nranks
	root := w.call.Root
	switch k {
	case Send:
		return []p2p{{send: true, peer: root, ptr: w.call.Send, bytes: w.sendN, w: w}}
	case Recv:
		return []p2p{{peer: root, ptr: w.call.Recv, bytes: w.recvN, w: w}}
	case Gather:
		one := w.sendN
		ps := []p2p{{send: true, peer: root, ptr: w.call.Send, bytes: one, w: w}}
		if me == root {
			for r := range n {
				ps = append(ps, p2p{peer: r, ptr: unsafe.Add(w.call.Recv, r*one), bytes: one, w: w})
			}
		}
		return ps
	case Scatter:
		one := w.recvN
		var ps []p2p
		if me == root {
			for r := range n {
				ps = append(ps, p2p{send: true, peer: r, ptr: unsafe.Add(w.call.Send, r*one), bytes: one, w: w})
			}
		}
		return append(ps, p2p{peer: root, ptr: w.call.Recv, bytes: one, w: w})
	}
	return nil
}

// hostBytes is the C caller's host memory as a slice.
func hostBytes(p unsafe.Pointer, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

func (w *work) hostData(p unsafe.Pointer, n int) rank.Data { return rank.Bytes(hostBytes(p, n), w.dt) }

// syncFirst waits for the caller's stream before a call on host buffers
// (the work queued on it may produce the data).
func (c *Comm) syncFirst(w *work) error {
	if mem := c.lib.opt.Memory; mem != nil && !w.device {
		if err := mem.Synchronize(w.call.Stream); err != nil {
			return fail(UnhandledCudaError, "synchronise stream %#x: %w", w.call.Stream, err)
		}
	}
	return nil
}

// runP2P runs a group of sends and receives. Entries to this rank itself
// pair up in order and are copies.
func (c *Comm) runP2P(ps []p2p) error {
	dev := ps[0].w.device
	if err := c.syncFirst(ps[0].w); err != nil {
		return err
	}
	var selfSend, selfRecv []p2p
	var host []rank.P2P
	var devOps []rank.DeviceP2P
	var stream *gpu.Stream
	if dev {
		stream = c.gpuDev.WrapStream(ps[0].w.call.Stream)
	}
	for _, p := range ps {
		if p.peer == c.rank {
			if p.send {
				selfSend = append(selfSend, p)
			} else {
				selfRecv = append(selfRecv, p)
			}
			continue
		}
		if dev {
			b, err := c.lib.mem.buffer(c.gpuDev, p.w.region(p.send), p.ptr, p.bytes)
			if err != nil {
				return err
			}
			devOps = append(devOps, rank.DeviceP2P{Send: p.send, Peer: p.peer, Buf: b})
			continue
		}
		d := p.w.hostData(p.ptr, p.bytes)
		if p.send {
			host = append(host, rank.SendTo(p.peer, d))
		} else {
			host = append(host, rank.RecvFrom(p.peer, d))
		}
	}
	if len(selfSend) != len(selfRecv) {
		return fail(InvalidUsage, "rank %d: %d sends to itself but %d receives from itself in one group", c.rank, len(selfSend), len(selfRecv))
	}
	for i := range selfSend {
		s, r := selfSend[i], selfRecv[i]
		if s.bytes != r.bytes {
			return fail(InvalidUsage, "rank %d: a send of %d bytes to itself meets a receive of %d bytes", c.rank, s.bytes, r.bytes)
		}
		if dev {
			src, err := c.lib.mem.buffer(c.gpuDev, s.w.sendReg, s.ptr, s.bytes)
			if err != nil {
				return err
			}
			dst, err := c.lib.mem.buffer(c.gpuDev, r.w.recvReg, r.ptr, r.bytes)
			if err != nil {
				return err
			}
			if err := stream.CopyDtoD(dst, src); err != nil {
				return fail(UnhandledCudaError, "rank %d: copy to itself: %w", c.rank, err)
			}
			continue
		}
		copy(hostBytes(r.ptr, r.bytes), hostBytes(s.ptr, s.bytes))
	}
	if dev {
		if len(devOps) == 0 {
			return nil
		}
		return c.dc.Group(c.ctx, stream, devOps...)
	}
	if len(host) == 0 {
		return nil
	}
	return c.rc.Group(c.ctx, host...)
}

// runColl runs one collective.
func (c *Comm) runColl(w *work) error {
	if w.device {
		return c.runDevice(w)
	}
	if err := c.syncFirst(w); err != nil {
		return err
	}
	ctx, call := c.ctx, w.call
	count := int(call.Count)
	send := w.hostData(call.Send, w.sendN)
	recv := w.hostData(call.Recv, w.recvN)
	if w.op.PreMul {
		scaled, err := preMul(hostBytes(call.Send, w.sendN), w.dt, w.op.Scalar)
		if err != nil {
			return err
		}
		send = rank.Bytes(scaled, w.dt)
	}
	op := w.op.Op
	switch call.Kind {
	case AllReduce:
		return c.rc.AllReduce(ctx, send, recv, op)
	case AllGather:
		return c.rc.AllGather(ctx, send, recv)
	case ReduceScatter:
		return c.rc.ReduceScatter(ctx, send, recv, op)
	case AllToAll:
		return c.rc.AllToAll(ctx, send, recv)
	case Broadcast:
		if w.sendN == 0 {
			send = recv
		}
		return c.rc.Broadcast(ctx, send, recv, call.Root)
	case Reduce:
		if w.recvN == 0 {
			recv = rank.Bytes(make([]byte, count*w.dt.Size()), w.dt)
		}
		return c.rc.Reduce(ctx, send, recv, op, call.Root)
	}
	return fail(InternalError, "%s is not a collective", call.Kind)
}

// runDevice enqueues one collective on device buffers on the caller's stream.
// A PreMulSum runs synchronously through host memory: the send buffer is
// copied out, multiplied by the scalar, copied into a device scratch buffer
// of the communicator (grown on demand, freed only with it, since peers map
// it), and summed from there; the call returns once the stream is done.
func (c *Comm) runDevice(w *work) (err error) {
	call := w.call
	dv := c.gpuDev
	s := dv.WrapStream(call.Stream)
	var send, recv *gpu.Buffer
	if w.sendN > 0 {
		if send, err = c.lib.mem.buffer(dv, w.sendReg, call.Send, w.sendN); err != nil {
			return err
		}
	}
	if w.recvN > 0 {
		if recv, err = c.lib.mem.buffer(dv, w.recvReg, call.Recv, w.recvN); err != nil {
			return err
		}
	}
	ctx, count, dt, op := c.ctx, int(call.Count), w.dt, w.op.Op
	if w.op.PreMul {
		if send, err = c.preMulDevice(s, w, send); err != nil {
			return err
		}
		op = dtype.Sum
		defer func() {
			// The scratch is reused by the next PreMulSum call, which may
			// come on another stream: this one finishes first.
			if serr := s.Synchronize(); serr != nil && err == nil {
				err = fail(UnhandledCudaError, "rank %d: PreMulSum: %w", c.rank, serr)
			}
		}()
	}
	switch call.Kind {
	case AllReduce:
		return c.dc.AllReduce(ctx, send, recv, count, dt, op, s)
	case AllGather:
		return c.dc.AllGather(ctx, send, recv, count, dt, s)
	case ReduceScatter:
		return c.dc.ReduceScatter(ctx, send, recv, count, dt, op, s)
	case AllToAll:
		return c.dc.AllToAll(ctx, send, recv, count, dt, s)
	case Broadcast:
		return c.dc.Broadcast(ctx, send, recv, count, dt, call.Root, s)
	case Reduce:
		return c.dc.Reduce(ctx, send, recv, count, dt, op, call.Root, s)
	}
	return fail(InternalError, "%s is not a collective", call.Kind)
}

// preMul returns a copy of b (elements of dt) times scalar.
func preMul(b []byte, dt dtype.DType, scalar float64) ([]byte, error) {
	out := make([]byte, len(b))
	switch dt {
	case dtype.Float32:
		src := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
		dst := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(out))), len(out)/4)
		for i, v := range src {
			dst[i] = float32(float64(v) * scalar)
		}
	case dtype.Float64:
		src := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
		dst := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(out))), len(out)/8)
		for i, v := range src {
			dst[i] = v * scalar
		}
	default:
		return nil, fail(InvalidArgument, "PreMulSum on host buffers of %s is not supported (float and double are)", dt)
	}
	return out, nil
}

var _ = context.Background
var _ = fmt.Sprint

// region is where w's send (send) or receive buffer was located.
func (w *work) region(send bool) Region {
	if send {
		return w.sendReg
	}
	return w.recvReg
}

// preMulDevice returns a device copy of send multiplied by w's scalar, in
// the communicator's PreMulSum scratch.
func (c *Comm) preMulDevice(s *gpu.Stream, w *work, send *gpu.Buffer) (*gpu.Buffer, error) {
	if w.op.ScalarPtr != 0 {
		return nil, fail(InvalidUsage, "rank %d: a PreMulSum with a device-resident scalar (ncclScalarDevice) on device buffers is not supported by flexlink; pass the scalar from host memory", c.rank)
	}
	if send == nil {
		return nil, nil // a rank without a send buffer (none in the reductions that take PreMulSum)
	}
	host := make([]byte, send.Len())
	if err := s.CopyDtoH(host, send); err != nil {
		return nil, fail(UnhandledCudaError, "rank %d: PreMulSum: copy the send buffer out: %w", c.rank, err)
	}
	if err := s.Synchronize(); err != nil {
		return nil, fail(UnhandledCudaError, "rank %d: PreMulSum: %w", c.rank, err)
	}
	scaled, err := preMul(host, w.dt, w.op.Scalar)
	if err != nil {
		return nil, err
	}
	if c.preMulScratch == nil || c.preMulScratch.Len() < len(scaled) {
		b, err := c.gpuDev.Alloc(max(len(scaled), 1<<20))
		if err != nil {
			return nil, fail(UnhandledCudaError, "rank %d: PreMulSum scratch of %d bytes: %w", c.rank, len(scaled), err)
		}
		if c.preMulScratch != nil {
			c.preMulRetired = append(c.preMulRetired, c.preMulScratch) // peers may still map it
		}
		c.preMulScratch = b
	}
	dst := c.preMulScratch.Sub(0, len(scaled))
	if err := s.CopyHtoD(dst, scaled); err != nil {
		return nil, fail(UnhandledCudaError, "rank %d: PreMulSum: copy the scaled buffer in: %w", c.rank, err)
	}
	return dst, nil
}
