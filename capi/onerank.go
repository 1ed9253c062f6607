package capi

import (
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/gpu"
)

// A collective of a one-rank communicator on device buffers (issue 29, "1
// rank ≤ 1.0× NCCL"): its result is its input (the sum, average, min or
// max of one vector, the one block of a gather or an all-to-all), so the
// call is what NCCL makes of it (ncclLaunchOneRank): out of place one
// device copy on the caller's stream, in place nothing; a PreMulSum one
// scaling kernel from the send buffer into the receive buffer. It goes
// neither through the DeviceComm (its queue, the plane's checks and Op)
// nor through the scratch, but for a PreMulSum's host-immediate scalar
// (the kernel reads its scalar from device memory): memory that cannot be
// IPC-exported needs no bounce where no peer maps it. No capture status
// is asked but for that scalar: a copy or a kernel on a capturing stream
// is recorded into the graph by the driver itself (a node that runs again
// at each replay on the buffers' contents then), and one on a stream
// whose capture was invalidated fails with the capture's own error, which
// refuses the call (ncclInvalidUsage) and leaves the communicator usable,
// as the plane's query did. The arguments are checked as every call's are
// (check, locate).

// oneRank reports whether w, on device buffers, takes runOneRank.
func (c *Comm) oneRank(w *work) bool {
	return c.nranks == 1 && w.device && !w.isP2P() && w.sendN == w.recvN
}

// viaScratch reports whether w, on device buffers, goes through the
// communicator's scratch, for which it must know whether the stream is
// capturing (the scratch is then the graph's own): a PreMulSum (at one
// rank only a host-immediate scalar goes there), or, past one rank, a
// buffer that cannot be IPC-exported.
func (c *Comm) viaScratch(w *work) bool {
	if c.oneRank(w) {
		return w.op.PreMul && w.op.ScalarPtr == 0
	}
	return w.op.PreMul || w.sendN > 0 && w.sendReg.NoIPC || w.recvN > 0 && w.recvReg.NoIPC
}

// runOneRank enqueues w's copy, send to recv, on the caller's stream (in
// place nothing), or its PreMulSum's kernel.
func (c *Comm) runOneRank(w *work) error {
	call := w.call
	if call.Send == call.Recv && !w.op.PreMul {
		return nil
	}
	send, err := c.lib.mem.buffer(c.gpuDev, w.sendReg, call.Send, w.sendN)
	if err != nil {
		return err
	}
	recv, err := c.lib.mem.buffer(c.gpuDev, w.recvReg, call.Recv, w.recvN)
	if err != nil {
		return err
	}
	s := c.wrapStream(call.Stream)
	what := "copy the send buffer into the receive buffer"
	if w.op.PreMul {
		what = "PreMulSum"
		err = c.oneRankPreMul(w, s, send, recv)
	} else {
		// The copy engine, as NCCL: a copy kernel (gpu.Stream.CopyLocal)
		// ran eager calls faster on an H200 (5-7.5 µs against 7.2) and
		// replays slower (1.0-1.3 against 0.9-1.15; docs/PERF.md, twentieth
		// session), and would make a one-rank job load the kernels.
		err = s.CopyDtoD(recv, send)
	}
	if err == nil {
		return nil
	}
	var checked *Error // (escapes to the heap: declared past the common case)
	switch {
	case errors.As(err, &checked): // a refusal of the call's arguments (deviceScalar)
		return err
	case gpu.IsCaptureError(err): // the caller's capture failed, not the communicator
		return refuse(InvalidUsage, "stream %#x: %w", call.Stream, err)
	}
	return fail(UnhandledCudaError, "%s: %w", what, err)
}

// oneRankPreMul enqueues recv = send × the PreMulSum's scalar on s: a
// device scalar is read where it is when the kernel runs; a host-immediate
// one is first copied into the scratch's scalar slot (runDevice's).
func (c *Comm) oneRankPreMul(w *work, s *gpu.Stream, send, recv *gpu.Buffer) (err error) {
	if w.op.ScalarPtr != 0 {
		scalar, err := c.deviceScalar(w)
		if err != nil {
			return err
		}
		return s.PreMul(recv, send, w.dt, scalar)
	}
	var sc *gpu.Buffer
	if w.capture {
		sc, err = graphScratch(s, scalarSlot)
	} else if sc, err = c.stage.acquire(c.gpuDev, s, scalarSlot); err == nil {
		defer func() {
			if rerr := c.stage.release(s); rerr != nil && err == nil {
				err = fmt.Errorf("record the scratch's last use: %w", rerr)
			}
		}()
	}
	if err != nil {
		return fmt.Errorf("scratch for the scalar: %w", err)
	}
	scalar := sc.Sub(0, w.dt.Size())
	if err := c.putScalar(s, scalar, w); err != nil {
		return fmt.Errorf("copy the scalar in: %w", err)
	}
	return s.PreMul(recv, send, w.dt, scalar)
}
