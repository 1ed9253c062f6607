package plane

import (
	"context"

	"github.com/flexlink/flexlink/gpu"
)

// callRec is one call's record: the Op handed to the plane, the stream,
// and the function the communicator's queue runs, bound once. A
// DeviceComm keeps a spare record, so a call on a warm communicator makes
// no heap allocation for its Op or the queue's function (issue 29, the
// small-message fast path). Plane.Do does not keep the Op after it
// returns (Plane's contract), so the record is reused as soon as the call
// has returned.
type callRec struct {
	d  *DeviceComm
	op Op
	s  *gpu.Stream
	ps []P2P                           // a Group's entries to peers, reused
	fn func(ctx context.Context) error // r.run, bound once
}

func (r *callRec) run(ctx context.Context) error { return r.d.do(ctx, &r.op, r.s) }

// record is a call record for one call: the spare one, or a new one when
// another call of this DeviceComm holds it (calls from several threads).
func (d *DeviceComm) record() *callRec {
	if r := d.spare.Swap(nil); r != nil {
		return r
	}
	r := &callRec{d: d}
	r.fn = r.run
	return r
}

// release makes r the spare record again, holding no buffer.
func (d *DeviceComm) release(r *callRec) {
	clear(r.ps[:cap(r.ps)]) // entries a refused group appended too
	r.op, r.s, r.ps = Op{}, nil, r.ps[:0]
	d.spare.Store(r)
}

// run runs r's call under the communicator's queue, on the caller's
// thread. Enqueue and return comes from the plane (the flag kernels,
// which meet their peers inside the GPU), never from a library thread: a
// thread that makes driver calls while a caller's stream waits for it
// deadlocks against any synchronous copy on another thread of the process
// (seen on an H200 under PyTorch: the thread's cuLaunchKernel waited
// behind the main thread's pageable cuMemcpyDtoHAsync, which waited for
// the stream).
func (d *DeviceComm) run(ctx context.Context, what string, r *callRec) error {
	return d.c.Run(ctx, what, r.fn)
}
