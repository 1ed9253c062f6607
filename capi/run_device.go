package capi

import (
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/rank"
)

// runDevice enqueues one collective on device buffers on the caller's
// stream and returns without waiting for it. Two kinds of call go through
// the communicator's scratch (stage.go), still on the caller's stream:
//   - a PreMulSum: a kernel writes the send buffer times the scalar (read
//     on the device, in the op's datatype: from the scalar the op was made
//     with, or from the caller's device scalar when the call runs) into
//     the scratch, and the collective sums from there;
//   - a buffer that cannot be IPC-exported (VMM memory): it is copied into
//     the scratch (send) or out of it (receive), so the peers map only
//     memory that can be mapped.
func (c *Comm) runDevice(w *work) (err error) {
	call := w.call
	dv := c.gpuDev
	s := c.wrapStream(call.Stream)
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
	op := w.op.Op
	// Under capture only paths that never map the caller's buffers run
	// (capture.go): memory that cannot be IPC-exported needs no bounce.
	bounceSend := send != nil && w.sendReg.NoIPC && !w.capture
	bounceRecv := recv != nil && w.recvReg.NoIPC && !w.capture
	if !w.op.PreMul && !bounceSend && !bounceRecv {
		return captureRefused(c.collDevice(w, send, recv, op, s))
	}
	var scalar *gpu.Buffer
	if w.op.PreMul && w.op.ScalarPtr != 0 {
		if scalar, err = c.deviceScalar(w); err != nil {
			return err
		}
	}
	need := scalarSlot + alignUp(w.sendN) + alignUp(w.recvN)
	var sc *gpu.Buffer
	if w.capture {
		sc, err = graphScratch(s, need) // the graph's own (stage.go)
	} else {
		sc, err = c.stage.acquire(dv, s, need)
		if err == nil {
			defer func() {
				if rerr := c.stage.release(s); rerr != nil && err == nil {
					err = fail(UnhandledCudaError, "rank %d: record the scratch's last use: %w", c.rank, rerr)
				}
			}()
		}
	}
	if err != nil {
		return fail(UnhandledCudaError, "rank %d: scratch of %d bytes: %w", c.rank, need, err)
	}
	sendPart := sc.Sub(scalarSlot, w.sendN)
	switch {
	case w.op.PreMul && send != nil:
		if scalar == nil {
			scalar = sc.Sub(0, w.dt.Size())
			if err := c.putScalar(s, scalar, w); err != nil {
				return fail(UnhandledCudaError, "rank %d: PreMulSum: copy the scalar in: %w", c.rank, err)
			}
		}
		if err := s.PreMul(sendPart, send, w.dt, scalar); err != nil {
			return fail(UnhandledCudaError, "rank %d: PreMulSum: %w", c.rank, err)
		}
		send, op = sendPart, dtype.Sum
	case w.op.PreMul:
		op = dtype.Sum // a rank without a send buffer (none in the reductions that take PreMulSum)
	case bounceSend:
		if err := s.CopyDtoD(sendPart, send); err != nil {
			return fail(UnhandledCudaError, "rank %d: copy the send buffer (not IPC-exportable) into the scratch: %w", c.rank, err)
		}
		send = sendPart
	}
	var userRecv *gpu.Buffer
	if bounceRecv {
		userRecv, recv = recv, sc.Sub(scalarSlot+alignUp(w.sendN), w.recvN)
	}
	if err := c.collDevice(w, send, recv, op, s); err != nil {
		return err
	}
	if userRecv != nil {
		if err := s.CopyDtoD(userRecv, recv); err != nil {
			return fail(UnhandledCudaError, "rank %d: copy the result out of the scratch: %w", c.rank, err)
		}
	}
	return nil
}

// collDevice enqueues w's collective on the given buffers.
func (c *Comm) collDevice(w *work, send, recv *gpu.Buffer, op dtype.Op, s *gpu.Stream) error {
	ctx, call, count, dt := c.ctx, w.call, int(w.call.Count), w.dt
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

// deviceScalar is the device scalar of w's PreMulSum (ncclScalarDevice) as
// a Buffer of one element on the communicator's GPU.
func (c *Comm) deviceScalar(w *work) (*gpu.Buffer, error) {
	mem := c.lib.opt.Memory
	p := w.op.ScalarPtr
	reg, ok := mem.Locate(p)
	if !ok || reg.Device != c.dev {
		return nil, refuse(InvalidArgument, "rank %d: PreMulSum: the device scalar %#x is not memory of GPU %d", c.rank, p, c.dev)
	}
	if off := int(p - reg.Base); off+w.dt.Size() > reg.Size {
		return nil, refuse(InvalidArgument, "rank %d: PreMulSum: the device scalar %#x runs past its allocation", c.rank, p)
	}
	return c.lib.mem.buffer(c.gpuDev, reg, cAddr(p), w.dt.Size())
}

// hostScalar is w's PreMulSum scalar as bytes of its datatype, for a call
// on host buffers: the host-immediate one, or the device scalar read now
// (the call is synchronous).
func (c *Comm) hostScalar(w *work) ([]byte, error) {
	if w.op.ScalarPtr == 0 {
		return w.op.Scalar, nil
	}
	n := w.dt.Size()
	mem := c.lib.opt.Memory
	if mem == nil {
		// No CUDA in the process: "device-visible" memory is host memory.
		return append([]byte(nil), unsafe.Slice((*byte)(cAddr(w.op.ScalarPtr)), n)...), nil
	}
	reg, ok := mem.Locate(w.op.ScalarPtr)
	if !ok {
		return append([]byte(nil), unsafe.Slice((*byte)(cAddr(w.op.ScalarPtr)), n)...), nil
	}
	if c.gpuDev == nil {
		return nil, refuse(InvalidUsage, "rank %d: PreMulSum: the scalar is device memory, but the communicator has no GPU to read it with", c.rank)
	}
	b, err := c.lib.mem.buffer(c.gpuDev, reg, cAddr(w.op.ScalarPtr), n)
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	s := c.gpuDev.WrapStream(w.call.Stream)
	if err := s.CopyDtoH(out, b); err != nil {
		return nil, fail(UnhandledCudaError, "rank %d: PreMulSum: read the device scalar: %w", c.rank, err)
	}
	return out, nil
}

// groupDevice runs a group of device sends and receives; those whose
// buffer cannot be IPC-exported go through the scratch: sends copied in
// first, receives copied out after, all on the caller's stream.
func (c *Comm) groupDevice(s *gpu.Stream, ops []rank.DeviceP2P, bounced []bool) (err error) {
	need := 0
	for i, op := range ops {
		if bounced[i] {
			need += alignUp(op.Buf.Len())
		}
	}
	if need > 0 {
		if ci, err := s.Capture(); err == nil && ci.Active {
			need = 0 // no bounce under capture (runDevice says why)
		}
	}
	if need == 0 {
		return captureRefused(c.dc.Group(c.ctx, s, ops...))
	}
	sc, err := c.stage.acquire(c.gpuDev, s, scalarSlot+need)
	if err != nil {
		return fail(UnhandledCudaError, "rank %d: scratch of %d bytes: %w", c.rank, need, err)
	}
	defer func() {
		if rerr := c.stage.release(s); rerr != nil && err == nil {
			err = fail(UnhandledCudaError, "rank %d: record the scratch's last use: %w", c.rank, rerr)
		}
	}()
	type out struct{ user, part *gpu.Buffer }
	var outs []out
	at := scalarSlot
	staged := append([]rank.DeviceP2P(nil), ops...)
	for i, op := range ops {
		if !bounced[i] {
			continue
		}
		part := sc.Sub(at, op.Buf.Len())
		at += alignUp(op.Buf.Len())
		if op.Send {
			if err := s.CopyDtoD(part, op.Buf); err != nil {
				return fail(UnhandledCudaError, "rank %d: copy a send to rank %d (not IPC-exportable) into the scratch: %w", c.rank, op.Peer, err)
			}
		} else {
			outs = append(outs, out{op.Buf, part})
		}
		staged[i].Buf = part
	}
	if err := c.dc.Group(c.ctx, s, staged...); err != nil {
		return err
	}
	for _, o := range outs {
		if err := s.CopyDtoD(o.user, o.part); err != nil {
			return fail(UnhandledCudaError, "rank %d: copy a receive out of the scratch: %w", c.rank, err)
		}
	}
	return nil
}

// cAddr is an address the C caller passed as an integer (device memory, or
// host memory that is not Go's), as the pointer type the buffer calls take.
func cAddr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// putScalar writes w's host-immediate PreMulSum scalar into dst for the
// work enqueued on s. Under capture it is written now, on a stream of its
// own: a copy node would read the caller's host memory at every replay,
// long after the call returned, and dst is the graph's own.
func (c *Comm) putScalar(s *gpu.Stream, dst *gpu.Buffer, w *work) error {
	if !w.capture {
		return s.CopyHtoD(dst, w.op.Scalar)
	}
	side, err := c.gpuDev.NewStream()
	if err != nil {
		return err
	}
	defer side.Close()
	if err := side.CopyHtoD(dst, w.op.Scalar); err != nil {
		return err
	}
	return side.Synchronize()
}
