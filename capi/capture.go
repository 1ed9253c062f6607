package capi

import (
	"errors"

	"github.com/flexlink/flexlink/rank"
)

// CUDA graph capture (docs/NCCL-API.md, "CUDA graphs"). A call on a
// capturing stream is enqueued where it replays correctly with no host
// involvement: device buffers on a one-rank communicator (copies), and the
// flag kernels of the direct plane (collectives/direct/capture.go). A
// PreMulSum's scratch belongs to the graph (stage.go: freed with it), and
// memory that cannot be IPC-exported (VMM) is used as it is, since neither
// path maps the caller's buffers. Everything else is refused with
// ncclInvalidUsage and a message that says what and why, before the call
// touches the communicator: it stays usable, and the capture is not
// invalidated (a PreMulSum refused by the plane leaves its scaling kernel
// in the graph, harmless: it writes only the graph's scratch). Replays
// count as calls: every rank must make the same sequence of calls, eager
// and replayed.

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

// captureRefused turns the plane's refusal of a call on a capturing
// stream into ncclInvalidUsage that leaves the communicator usable; other
// errors pass as they are.
func captureRefused(err error) error {
	if err != nil && errors.Is(err, rank.ErrNotCapturable) {
		return refuse(InvalidUsage, "%w", err)
	}
	return err
}
