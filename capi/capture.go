package capi

import (
	"errors"

	"github.com/flexlink/flexlink/rank"
)

// CUDA graph capture (docs/NCCL-API.md, "CUDA graphs"). A call on a
// capturing stream is enqueued where it replays correctly with no host
// involvement: device buffers on a one-rank communicator (copies), and
// the flag kernels of the direct plane (collectives/direct/capture.go).
// Everything else is refused with ncclInvalidUsage and a message that says
// what and why, before the call touches the communicator: it stays
// usable, and the capture is not invalidated. Replays count as calls:
// every rank must make the same sequence of calls, eager and replayed.

// capturing reports whether stream is capturing a CUDA graph: through the
// communicator's GPU (the driver flexlink loaded, or the fake in tests),
// else through Memory.
func (c *Comm) capturing(stream uintptr) (bool, error) {
	if c.gpuDev != nil {
		ci, err := c.gpuDev.WrapStream(stream).Capture()
		if err != nil {
			return false, fail(UnhandledCudaError, "capture status of stream %#x: %w", stream, err)
		}
		if ci.Invalidated {
			return false, refuse(InvalidUsage, "stream %#x: its CUDA graph capture was invalidated before this call", stream)
		}
		return ci.Active, nil
	}
	if mem := c.lib.opt.Memory; mem != nil {
		return mem.Capturing(stream), nil
	}
	return false, nil
}

// captureBlocker refuses, on a capturing stream, what this library runs
// through its scratch (stage.go), whose reuse is ordered by host-side
// events; the rest is the plane's to decide (captureRefused).
func (w *work) captureBlocker() error {
	switch {
	case w.op.PreMul:
		return refuse(InvalidUsage, "ncclPreMulSum on a stream that is capturing a CUDA graph: it runs through the communicator's scratch, whose reuse is ordered by host-side events")
	case w.sendN > 0 && w.sendReg.NoIPC, w.recvN > 0 && w.recvReg.NoIPC:
		return refuse(InvalidUsage, "a buffer that cannot be IPC-exported (VMM memory, as PyTorch's expandable_segments) on a stream that is capturing a CUDA graph: it goes through the communicator's scratch, whose reuse is ordered by host-side events")
	}
	return nil
}

// captureRefused turns the plane's refusal of a call on a capturing
// stream into ncclInvalidUsage that leaves the communicator usable; other
// errors pass as they are.
func captureRefused(err error) error {
	if err != nil && errors.Is(err, rank.ErrNotCapturable) {
		return refuse(InvalidUsage, "%w", err)
	}
	return err
}
