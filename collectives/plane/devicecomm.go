package plane

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// DeviceComm is the plane side of rank.DeviceComm, whose documentation is
// the contract (stream semantics, the two planes, counts, buffers): see
// rank.DeviceComm. It checks and trims each call's buffers, runs it under
// the communicator's queue on the caller's thread and logs it
// (calllog.go); the plane behind it does the work.
type DeviceComm struct {
	c     Caller
	dev   *gpu.Device
	path  string
	plane Plane
	log   callLog                 // per-call lines (calllog.go)
	spare atomic.Pointer[callRec] // callrec.go
}

// NewDeviceComm wraps the plane the ranks agreed on (path names it:
// "direct" or "staged") for dev. internal/comm/device makes the choice.
func NewDeviceComm(c Caller, dev *gpu.Device, path string, p Plane) *DeviceComm {
	return &DeviceComm{c: c, dev: dev, path: path, plane: p, log: newCallLog(c.Log())}
}

// SendTo and RecvFrom: see rank.DeviceSendTo and rank.DeviceRecvFrom.
func SendTo(peer int, b *gpu.Buffer) P2P { return P2P{Send: true, Peer: peer, Buf: b} }

func RecvFrom(peer int, b *gpu.Buffer) P2P { return P2P{Peer: peer, Buf: b} }

// Caller is what a DeviceComm needs from its communicator: what a plane
// needs (Host), the call queue, and argument checks. comm.Comm implements
// it.
type Caller interface {
	Host
	// Run executes one call under the communicator's queue, with its
	// default deadline and abort handling.
	Run(ctx context.Context, what string, f func(ctx context.Context) error) error
	CheckRoot(root int) error
	CheckPeer(peer int) error
}

// Path: see rank.DeviceComm.Path.
func (d *DeviceComm) Path() string { return d.path }

// Comm is the communicator the DeviceComm belongs to: see
// rank.DeviceComm.Comm.
func (d *DeviceComm) Comm() Caller { return d.c }

// GPU: see rank.DeviceComm.GPU.
func (d *DeviceComm) GPU() *gpu.Device { return d.dev }

// LinkShares: see rank.DeviceComm.LinkShares.
func (d *DeviceComm) LinkShares() map[string]float64 {
	return d.plane.LinkShares()
}

// Close: see rank.DeviceComm.Close.
func (d *DeviceComm) Close(ctx context.Context) error {
	// The peers' kernels write into this rank's memory until they end:
	// every rank waits for its own before the barrier.
	qerr := d.plane.Quiesce()
	if qerr != nil {
		qerr = fmt.Errorf("rank %d: gpu close: %w", d.c.Rank(), qerr)
	}
	err := d.c.Run(ctx, "gpu close", d.c.Engine().Barrier)
	// Without the barrier a peer's kernel may still be writing into this
	// rank's memory: the plane leaks it (the process is usually about to
	// exit after a failure) rather than free memory that is being written.
	if cerr := d.plane.Close(err == nil && qerr == nil); err == nil {
		err = cerr
	}
	if qerr != nil {
		return qerr
	}
	return err
}

// AsyncError: see rank.DeviceComm.AsyncError.
func (d *DeviceComm) AsyncError() error {
	if err := d.plane.AsyncError(); err != nil {
		return fmt.Errorf("rank %d on %s: %w", d.c.WorldRank(), d.c.Host(), err)
	}
	return nil
}

// AllReduce: see rank.DeviceComm.AllReduce.
func (d *DeviceComm) AllReduce(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, s *gpu.Stream) error {
	return d.call(ctx, s, Op{Kind: AllReduce, Send: send, Recv: recv, Count: count, DT: dt, Op: op}, count, count)
}

// AllGather: see rank.DeviceComm.AllGather.
func (d *DeviceComm) AllGather(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, s *gpu.Stream) error {
	return d.call(ctx, s, Op{Kind: AllGather, Send: send, Recv: recv, Count: count, DT: dt}, count, count*d.c.Size())
}

// ReduceScatter: see rank.DeviceComm.ReduceScatter.
func (d *DeviceComm) ReduceScatter(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, s *gpu.Stream) error {
	return d.call(ctx, s, Op{Kind: ReduceScatter, Send: send, Recv: recv, Count: count, DT: dt, Op: op}, count*d.c.Size(), count)
}

// Broadcast: see rank.DeviceComm.Broadcast.
func (d *DeviceComm) Broadcast(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, root int, s *gpu.Stream) error {
	if err := d.c.CheckRoot(root); err != nil {
		return err
	}
	sc := count
	if d.c.Rank() != root {
		send, sc = nil, -1
	}
	return d.call(ctx, s, Op{Kind: Broadcast, Send: send, Recv: recv, Count: count, DT: dt, Root: root}, sc, count)
}

// Reduce: see rank.DeviceComm.Reduce.
func (d *DeviceComm) Reduce(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, op dtype.Op, root int, s *gpu.Stream) error {
	if err := d.c.CheckRoot(root); err != nil {
		return err
	}
	rc := count
	if d.c.Rank() != root {
		recv, rc = nil, -1
	}
	return d.call(ctx, s, Op{Kind: Reduce, Send: send, Recv: recv, Count: count, DT: dt, Op: op, Root: root}, count, rc)
}

// AllToAll: see rank.DeviceComm.AllToAll.
func (d *DeviceComm) AllToAll(ctx context.Context, send, recv *gpu.Buffer, count int, dt dtype.DType, s *gpu.Stream) error {
	n := count * d.c.Size()
	return d.call(ctx, s, Op{Kind: AllToAll, Send: send, Recv: recv, Count: count, DT: dt}, n, n)
}

// Group: see rank.DeviceComm.Group. Entries to the rank itself pair up in
// order (the i-th send with the i-th receive) and are copies on s; one
// such pair beside entries to peers rides in the direct plane's call
// (Op.Self: inside the flag kernel where one runs).
func (d *DeviceComm) Group(ctx context.Context, s *gpu.Stream, ops ...P2P) error {
	r := d.record()
	defer d.release(r)
	ps := r.ps
	var selfs [2][]*gpu.Buffer // sends, receives to the rank itself
	me := d.c.Rank()
	for i, o := range ops {
		if o.Peer != me {
			if err := d.c.CheckPeer(o.Peer); err != nil {
				return fmt.Errorf("gpu group entry %d: %w", i, err)
			}
		}
		if err := d.local("group entry", o.Buf, -1); err != nil {
			return fmt.Errorf("gpu group entry %d: %w", i, err)
		}
		if o.Peer != me {
			ps = append(ps, o)
		} else if o.Send {
			selfs[0] = append(selfs[0], o.Buf)
		} else {
			selfs[1] = append(selfs[1], o.Buf)
		}
	}
	if s == nil || s.Device() != d.dev {
		return fmt.Errorf("rank %d: gpu group: stream is not on %s", me, d.dev)
	}
	if len(selfs[0]) != len(selfs[1]) {
		return fmt.Errorf("rank %d: gpu group: %d sends to itself but %d receives from itself: %w", me, len(selfs[0]), len(selfs[1]), errs.ErrMismatch)
	}
	for i, src := range selfs[0] {
		if dst := selfs[1][i]; dst.Len() != src.Len() {
			return fmt.Errorf("rank %d: gpu group: a send of %d bytes to itself meets a receive of %d bytes: %w", me, src.Len(), dst.Len(), errs.ErrMismatch)
		}
	}
	r.ps = ps // reused by the next call
	r.op, r.s = Op{Kind: Group, P2P: ps, DT: dtype.Uint8}, s
	o := &r.op
	if len(ps) > 0 {
		if err := d.captureOf(o, s); err != nil {
			return err
		}
	}
	copies := selfs[0]
	if len(ps) > 0 && len(copies) == 1 && copies[0].Len() > 0 && d.path == "direct" {
		o.Self, copies = gpu.SideCopy{Dst: selfs[1][0], Src: copies[0]}, nil
	}
	for i, src := range copies {
		if src.Len() == 0 || src.Ptr() == selfs[1][i].Ptr() {
			continue
		}
		// The copy engine: a one-rank job loads no kernels.
		if err := s.CopyDtoD(selfs[1][i], src); err != nil {
			return fmt.Errorf("rank %d: gpu group: copy to itself: %w", me, err)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return d.run(ctx, o.Kind.what(), r) // "gpu group send/recv", a constant
}

// Send: see rank.DeviceComm.Send.
func (d *DeviceComm) Send(ctx context.Context, b *gpu.Buffer, peer int, s *gpu.Stream) error {
	return d.Group(ctx, s, SendTo(peer, b))
}

// Recv: see rank.DeviceComm.Recv.
func (d *DeviceComm) Recv(ctx context.Context, b *gpu.Buffer, peer int, s *gpu.Stream) error {
	return d.Group(ctx, s, RecvFrom(peer, b))
}

// call checks o's buffers (send holds sendCount elements, recv recvCount;
// -1: the rank has none), trims them to size and runs o.
func (d *DeviceComm) call(ctx context.Context, s *gpu.Stream, op Op, sendCount, recvCount int) error {
	r := d.record()
	defer d.release(r)
	r.op, r.s = op, s
	o := &r.op
	what := o.Kind.what()
	if !o.DT.Valid() || (o.Kind == AllReduce || o.Kind == ReduceScatter || o.Kind == Reduce) && !o.Op.Valid() {
		return fmt.Errorf("rank %d: %s: invalid dtype %v or op %v", d.c.Rank(), what, o.DT, o.Op)
	}
	if o.Count < 0 {
		return fmt.Errorf("rank %d: %s: negative count %d", d.c.Rank(), what, o.Count)
	}
	if s == nil || s.Device() != d.dev {
		return fmt.Errorf("rank %d: %s: stream is not on %s", d.c.Rank(), what, d.dev)
	}
	sz := o.DT.Size()
	var err error
	if sendCount >= 0 {
		if err = d.localSide(what, " send", o.Send, sendCount*sz); err != nil {
			return err
		}
		o.Send = trimmed(o.Send, sendCount*sz)
	}
	if recvCount >= 0 {
		if err = d.localSide(what, " recv", o.Recv, recvCount*sz); err != nil {
			return err
		}
		o.Recv = trimmed(o.Recv, recvCount*sz)
	}
	if d.path != "direct" || !oneRankInPlace(d.c.Size(), o) { // the direct plane enqueues nothing for it: no capture to ask about
		if err := d.captureOf(o, s); err != nil {
			return err
		}
	}
	return d.run(ctx, what, r)
}

// oneRankInPlace reports whether o is a collective of a one-rank
// communicator whose recv is its send: the direct plane enqueues nothing
// for it (collectives/direct's selfCopy; NCCL returns at once there too).
func oneRankInPlace(n int, o *Op) bool {
	return n == 1 && o.Kind != Group && o.Kind != AllToAllv && o.Send != nil && o.Recv != nil && o.Send.Ptr() == o.Recv.Ptr()
}

// local checks that b is on the DeviceComm's GPU and holds at least n bytes
// (n < 0: any length; b nil with n < 0 is fine).
// localSide is local for what+side, the name made only for an error (a
// call makes no string).
func (d *DeviceComm) localSide(what, side string, b *gpu.Buffer, n int) error {
	if b != nil && b.Device() == d.dev && b.Len() >= n {
		return nil
	}
	return d.local(what+side, b, n)
}

// trimmed is b's first n bytes: b itself when it holds exactly n (a call
// makes no Buffer then).
func trimmed(b *gpu.Buffer, n int) *gpu.Buffer {
	if b.Len() == n {
		return b
	}
	return b.Sub(0, n)
}

func (d *DeviceComm) local(what string, b *gpu.Buffer, n int) error {
	if b == nil {
		if n < 0 {
			return nil
		}
		return fmt.Errorf("rank %d: %s: nil buffer", d.c.Rank(), what)
	}
	if b.Device() != d.dev {
		return fmt.Errorf("rank %d: %s: buffer is on %s, not %s", d.c.Rank(), what, b.Device(), d.dev)
	}
	if b.Len() < n {
		return fmt.Errorf("rank %d: %s: buffer holds %d bytes, need %d: %w", d.c.Rank(), what, b.Len(), n, errs.ErrMismatch)
	}
	return nil
}

// Plane is the plane behind d (for tests that look inside it).
func (d *DeviceComm) Plane() Plane { return d.plane }
