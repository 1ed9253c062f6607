package capi

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
)

// Kind names a collective or point-to-point call.
type Kind int

const (
	AllReduce Kind = iota
	AllGather
	ReduceScatter
	Broadcast
	Reduce
	AllToAll
	Gather
	Scatter
	Send
	Recv
)

var kindNames = [...]string{"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclReduce", "ncclAlltoAll", "ncclGather", "ncclScatter", "ncclSend", "ncclRecv"}

func (k Kind) String() string { return kindNames[k] }

// Call is one collective or point-to-point call as the C caller made it.
// Root is the root of rooted calls and the peer of Send and Recv. Send and
// Recv (the buffers) are the caller's pointers; for Send and Recv calls the
// one buffer is in Send or Recv respectively.
type Call struct {
	Kind   Kind
	Send   unsafe.Pointer
	Recv   unsafe.Pointer
	Count  uint64
	Type   int32
	Op     int32
	Root   int
	Stream uintptr
}

// work is a checked Call on its communicator.
type work struct {
	c                *Comm
	call             Call
	dt               dtype.DType
	op               RedOp
	sendN, recvN     int // bytes of each buffer this rank touches (0: unused)
	device           bool
	sendReg, recvReg Region
	capture          bool // call.Stream is capturing a CUDA graph (capture.go)
}

// Coll checks and runs (or, inside a group, queues) call on communicator
// h for thread tid. Outside a group a call on host buffers returns when it
// is done; one on device buffers once it is enqueued on call.Stream. Tid
// 0 names no thread: a caller that learns from GroupsOpen that no thread
// has a group open may pass it instead of finding its own.
func (l *Library) Coll(tid int, h uintptr, call Call) error {
	fn := call.Kind.String()
	w, err := l.checkCall(fn, h, call)
	if err != nil {
		l.groups.refused(tid, err)
		return err
	}
	if w == nil {
		return nil // count 0: nothing to do, as NCCL
	}
	if l.groups.queue(tid, w) {
		if l.log.IsTrace() { // the arguments would be boxed even when off
			l.log.Trace("deferred to the group's end", "call", fn, "tid", tid, "rank", w.c.rank)
		}
		return nil
	}
	err = w.c.runAllOne(w)
	l.freeWork(w)
	return err
}

// checkCall finds the communicator and checks call against it; a nil work
// means there is nothing to do (count 0).
func (l *Library) checkCall(fn string, h uintptr, call Call) (*work, error) {
	c, err := l.handles.comm(h, fn)
	if err != nil {
		return nil, err
	}
	if err := c.usable(fn); err != nil {
		return nil, err
	}
	return c.check(call)
}

// runAllOne runs one call outside a group. A refusal (Error.Local) fails
// the call only; a failure once the call has started fails the
// communicator, as a failed collective leaves the ranks out of step.
func (c *Comm) runAllOne(w *work) error {
	if err := c.runAll([]*work{w}); err != nil {
		err = &Error{Code: ResultOf(err), Err: fmt.Errorf("%s rank %d of %d: %w", w.call.Kind, c.rank, c.nranks, err), Local: isLocal(err)}
		c.failed(err)
		return err
	}
	return nil
}

// check validates call's arguments against the communicator; a nil work
// means there is nothing to do (count 0).
func (c *Comm) check(call Call) (*work, error) {
	fn := call.Kind.String()
	w := c.lib.newWork(c, call)
	dt, err := DataType(call.Type)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	w.dt = dt
	switch call.Kind {
	case AllReduce, ReduceScatter, Reduce:
		if w.op, err = c.redOp(call.Op, dt); err != nil {
			return nil, fmt.Errorf("%s: %w", fn, err)
		}
	}
	n := uint64(c.nranks)
	if call.Count > math.MaxInt64/uint64(dt.Size())/n {
		return nil, fail(InvalidArgument, "%s: count %d of %s overflows the byte size of a buffer for %d ranks", fn, call.Count, dt, n)
	}
	one := int(call.Count) * dt.Size()
	all := one * c.nranks
	switch call.Kind {
	case Broadcast, Reduce, Gather, Scatter, Send, Recv:
		if call.Root < 0 || call.Root >= c.nranks {
			what := "root"
			if call.Kind == Send || call.Kind == Recv {
				what = "peer"
			}
			return nil, fail(InvalidArgument, "%s: %s %d is out of range for %d ranks", fn, what, call.Root, c.nranks)
		}
	}
	isRoot := call.Root == c.rank
	switch call.Kind {
	case AllReduce:
		w.sendN, w.recvN = one, one
	case AllGather:
		w.sendN, w.recvN = one, all
	case ReduceScatter:
		w.sendN, w.recvN = all, one
	case Broadcast:
		w.recvN = one
		if isRoot {
			w.sendN = one
		}
	case Reduce:
		w.sendN = one
		if isRoot {
			w.recvN = one
		}
	case AllToAll:
		w.sendN, w.recvN = all, all
	case Gather:
		w.sendN = one
		if isRoot {
			w.recvN = all
		}
	case Scatter:
		w.recvN = one
		if isRoot {
			w.sendN = all
		}
	case Send:
		w.sendN = one
	case Recv:
		w.recvN = one
	default:
		return nil, fail(InternalError, "unknown call kind %d", call.Kind)
	}
	if w.sendN > 0 && call.Send == nil {
		return nil, fail(InvalidArgument, "%s: send buffer is NULL (count %d)", fn, call.Count)
	}
	if w.recvN > 0 && call.Recv == nil {
		return nil, fail(InvalidArgument, "%s: receive buffer is NULL (count %d)", fn, call.Count)
	}
	if w.sendN == 0 && w.recvN == 0 {
		// Count 0: nothing to do, as NCCL, and no driver call to learn
		// where buffers nobody touches live.
		c.lib.freeWork(w)
		return nil, nil
	}
	if err := c.locate(w); err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	return w, nil
}

// locate decides whether w runs on device or host buffers.
func (c *Comm) locate(w *work) error {
	mem := c.lib.opt.Memory
	if mem == nil {
		return nil
	}
	var sd, rd bool
	if w.sendN > 0 {
		w.sendReg, sd = mem.Locate(uintptr(w.call.Send))
	}
	switch {
	case w.recvN > 0 && w.sendN > 0 && w.call.Recv == w.call.Send: // in place: one driver query
		w.recvReg, rd = w.sendReg, sd
	case w.recvN > 0 && sd && w.sendReg.contains(uintptr(w.call.Recv)):
		// In the send buffer's allocation (tensors of one segment of
		// PyTorch's caching allocator): that allocation was just found
		// live, and live allocations never share an address.
		w.recvReg, rd = w.sendReg, true
	case w.recvN > 0:
		w.recvReg, rd = mem.Locate(uintptr(w.call.Recv))
	}
	if w.sendN > 0 && w.recvN > 0 && sd != rd {
		return fail(InvalidArgument, "send buffer %p and receive buffer %p: one is device memory and the other is not", w.call.Send, w.call.Recv)
	}
	w.device = sd || rd
	if !w.device {
		if w.sendN == 0 && w.recvN == 0 {
			return nil // count 0 is nothing to do, captured or not (as NCCL)
		}
		capture, err := c.capturing(w.call.Stream)
		if err != nil {
			return err
		}
		if capture {
			return refuse(InvalidUsage, "host buffers on a stream that is capturing a CUDA graph: the call would run on the host now, not when the graph is replayed")
		}
		return nil
	}
	if c.dc == nil {
		return fail(InvalidUsage, "device buffers on a communicator without a GPU (no CUDA driver when it was created)")
	}
	// The DeviceComm checks every device call's capture itself; only the
	// calls that go through this library's scratch need it here
	// (run_device.go, onerank.go): one driver query per call, not two.
	if c.viaScratch(w) {
		var err error
		if w.capture, err = c.capturing(w.call.Stream); err != nil {
			return err
		}
	}
	for _, r := range []struct {
		n   int
		reg Region
		p   unsafe.Pointer
	}{{w.sendN, w.sendReg, w.call.Send}, {w.recvN, w.recvReg, w.call.Recv}} {
		if r.n == 0 {
			continue
		}
		if r.reg.Device != c.dev {
			return fail(InvalidArgument, "buffer %p is on GPU %d, the communicator's rank %d is on GPU %d", r.p, r.reg.Device, c.rank, c.dev)
		}
		if off := int(uintptr(r.p) - r.reg.Base); off < 0 || off+r.n > r.reg.Size {
			return fail(InvalidArgument, "buffer %p + %d bytes runs past its allocation (%#x, %d bytes)", r.p, r.n, r.reg.Base, r.reg.Size)
		}
	}
	return nil
}
