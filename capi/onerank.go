package capi

import "github.com/flexlink/flexlink/gpu"

// A collective of a one-rank communicator on device buffers (issue 29, "1
// rank ≤ 1.0× NCCL"): its result is its input (the sum, average, min or
// max of one vector, the one block of a gather or an all-to-all), so the
// call is what NCCL makes of it (ncclLaunchOneRank): out of place one
// device copy on the caller's stream, in place nothing. It goes neither
// through the DeviceComm (its queue, the plane's checks and Op) nor
// through the scratch: memory that cannot be IPC-exported needs no bounce
// where no peer maps it. No capture status is asked: a copy on a
// capturing stream is recorded into the graph by the driver itself (a
// node that copies the buffers again at each replay), and one on a stream
// whose capture was invalidated fails with the capture's own error, which
// refuses the call (ncclInvalidUsage) and leaves the communicator usable,
// as the plane's query did. The arguments are checked as every call's are
// (check, locate). A PreMulSum still takes the general path: its scaling
// is a kernel that reads the scalar from the scratch.

// oneRankCopy reports whether w, on device buffers, takes runOneRank.
func (c *Comm) oneRankCopy(w *work) bool {
	return c.nranks == 1 && w.device && !w.op.PreMul && !w.isP2P() && w.sendN == w.recvN
}

// runOneRank enqueues w's copy, send to recv, on the caller's stream; in
// place it enqueues nothing.
func (c *Comm) runOneRank(w *work) error {
	call := w.call
	if call.Send == call.Recv {
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
	if err := c.wrapStream(call.Stream).CopyDtoD(recv, send); err != nil {
		if gpu.IsCaptureError(err) { // the caller's capture failed, not the communicator
			return refuse(InvalidUsage, "stream %#x: %w", call.Stream, err)
		}
		return fail(UnhandledCudaError, "copy the send buffer into the receive buffer: %w", err)
	}
	return nil
}
