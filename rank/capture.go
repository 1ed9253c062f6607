package rank

import "github.com/flexlink/flexlink/collectives/plane"

// CUDA graph capture. A DeviceComm call on a stream that is being captured
// (gpu.Stream.BeginCapture, or torch.cuda.graph around a C caller) is
// recorded into the graph when it can replay with no host involvement:
// every collective of a one-rank communicator, and on the direct plane the
// flag kernels' collectives (allreduce, reduce-scatter, allgather,
// alltoall, broadcast, reduce, at any size) and a two-rank Group of one
// send, one receive, or one send and one receive of the same size. Other
// calls on a capturing stream fail with an error wrapping ErrNotCapturable
// that says why, before they touch the communicator (it stays usable).
//
// Each replay of the graph (gpu.GraphExec.Launch) is one more call of the
// calls captured, in order: every rank must make the same sequence of
// calls, eager ones and replays together. A rank's replays and eager calls
// may use different streams; they are ordered on the device. The graph
// holds the communicator's device memory until it is destroyed, so a
// DeviceComm may be closed before its graphs (replaying them then is an
// error: the peers are gone).

// ErrNotCapturable is wrapped by the error of a DeviceComm call refused on
// a capturing stream. It wraps errs.ErrNotSupported.
var ErrNotCapturable = plane.ErrNotCapturable
