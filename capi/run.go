package capi

import (
	"sync/atomic"
	"unsafe"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/rank"
	"github.com/flexlink/flexlink/reduce"
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
	var lists *p2pLists
	defer func() {
		if lists != nil {
			c.lib.putLists(lists)
		}
	}()
	flush := func() error {
		if lists == nil || len(lists.pending) == 0 {
			return nil
		}
		err := c.runP2P(lists)
		lists.reset()
		return err
	}
	for _, w := range ws {
		if w.isP2P() {
			if lists == nil {
				lists = c.lib.getLists()
			}
			if len(lists.pending) > 0 && lists.pending[0].w.device != w.device {
				if err := flush(); err != nil {
					return err
				}
			}
			lists.pending = w.appendP2Ps(lists.pending)
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

// isP2P reports whether w's call is a point-to-point one (runP2P's).
func (w *work) isP2P() bool {
	switch w.call.Kind {
	case Send, Recv, Gather, Scatter:
		return true
	}
	return false
}

// appendP2Ps appends the sends and receives of a point-to-point call to
// ps.
func (w *work) appendP2Ps(ps []p2p) []p2p {
	k, me, n := w.call.Kind, w.c.rank, w.c.nranks
	root := w.call.Root
	switch k {
	case Send:
		ps = append(ps, p2p{send: true, peer: root, ptr: w.call.Send, bytes: w.sendN, w: w})
	case Recv:
		ps = append(ps, p2p{peer: root, ptr: w.call.Recv, bytes: w.recvN, w: w})
	case Gather:
		one := w.sendN
		ps = append(ps, p2p{send: true, peer: root, ptr: w.call.Send, bytes: one, w: w})
		if me == root {
			for r := range n {
				ps = append(ps, p2p{peer: r, ptr: unsafe.Add(w.call.Recv, r*one), bytes: one, w: w})
			}
		}
	case Scatter:
		one := w.recvN
		if me == root {
			for r := range n {
				ps = append(ps, p2p{send: true, peer: r, ptr: unsafe.Add(w.call.Send, r*one), bytes: one, w: w})
			}
		}
		ps = append(ps, p2p{peer: root, ptr: w.call.Recv, bytes: one, w: w})
	}
	return ps
}

// p2pLists are the lists runAll and runP2P build for a group of sends
// and receives, reused from one group to the next (Library.lists): the
// point-to-point path allocates none of its own once warm. Nothing keeps
// them past the call (rank's Group and DeviceComm.Group copy theirs).
type p2pLists struct {
	pending            []p2p // the group's sends and receives, in order
	selfSend, selfRecv []p2p // those to this rank itself
	host               []rank.P2P
	devOps             []rank.DeviceP2P
	bounced            []bool // devOps[i]'s buffer cannot be IPC-exported
}

// reset empties l, dropping what its entries point to.
func (l *p2pLists) reset() {
	clear(l.pending)
	clear(l.selfSend)
	clear(l.selfRecv)
	clear(l.host)
	clear(l.devOps)
	l.pending, l.selfSend, l.selfRecv = l.pending[:0], l.selfSend[:0], l.selfRecv[:0]
	l.host, l.devOps, l.bounced = l.host[:0], l.devOps[:0], l.bounced[:0]
}

// maxListLen bounds the lists kept for reuse: an all-to-all of many ranks
// made of sends and receives leaves its long lists to the collector.
const maxListLen = 1024

func (l *Library) getLists() *p2pLists {
	if v, ok := l.lists.Get().(*p2pLists); ok {
		return v
	}
	return new(p2pLists)
}

func (l *Library) putLists(v *p2pLists) {
	if cap(v.pending) > maxListLen {
		return
	}
	v.reset()
	l.lists.Put(v)
}

// hostBytes is the C caller's host memory as a slice.
func hostBytes(p unsafe.Pointer, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// newWork is a work for call on c, reused from one that ran outside a
// group (freeWork), so a call allocates none.
func (l *Library) newWork(c *Comm, call Call) *work {
	w, _ := l.works.Get().(*work)
	if w == nil {
		w = new(work)
	}
	*w = work{c: c, call: call}
	return w
}

// freeWork gives back w once its call has returned (nothing keeps it).
func (l *Library) freeWork(w *work) {
	*w = work{}
	l.works.Put(w)
}

// wrapStream is the caller's stream h as a gpu.Stream: the last call's
// when the same (a program calls on one stream again and again), so a
// call makes none.
func (c *Comm) wrapStream(h uintptr) *gpu.Stream {
	if s := c.stream.Load(); s != nil && s.Handle() == h {
		return s
	}
	s := c.gpuDev.WrapStream(h)
	c.stream.Store(s)
	return s
}

// hostData is the caller's n bytes of host memory at p as w's elements.
func (w *work) hostData(p unsafe.Pointer, n int) rank.Data { return w.c.views.data(p, n, w.dt) }

// hostViews are the last host buffers a communicator's calls used, as
// rank.Data: making one boxes the slice (a heap allocation), and a
// program calls on the same few buffers again and again. Read and written
// without a lock; a view is never changed once made.
type hostViews struct {
	slots [4]atomic.Pointer[hostView]
	next  atomic.Uint32
}

type hostView struct {
	p  unsafe.Pointer
	n  int
	dt dtype.DType
	d  rank.Data
}

// data is rank.Bytes of the n bytes at p, an earlier one when the same.
func (v *hostViews) data(p unsafe.Pointer, n int, dt dtype.DType) rank.Data {
	for i := range v.slots {
		if h := v.slots[i].Load(); h != nil && h.p == p && h.n == n && h.dt == dt {
			return h.d
		}
	}
	d := rank.Bytes(hostBytes(p, n), dt)
	v.slots[v.next.Add(1)%uint32(len(v.slots))].Store(&hostView{p: p, n: n, dt: dt, d: d})
	return d
}

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

// runP2P runs a group of sends and receives (l.pending); the other lists
// of l are its own, empty on entry. Entries to this rank itself pair up in
// order and are copies.
func (c *Comm) runP2P(l *p2pLists) error {
	ps := l.pending
	dev := ps[0].w.device
	if err := c.syncFirst(ps[0].w); err != nil {
		return err
	}
	var stream *gpu.Stream
	if dev {
		stream = c.wrapStream(ps[0].w.call.Stream)
	}
	for _, p := range ps {
		if p.peer == c.rank {
			if p.send {
				l.selfSend = append(l.selfSend, p)
			} else {
				l.selfRecv = append(l.selfRecv, p)
			}
			continue
		}
		if dev {
			b, err := c.lib.mem.buffer(c.gpuDev, p.w.region(p.send), p.ptr, p.bytes)
			if err != nil {
				return err
			}
			l.bounced = append(l.bounced, p.w.region(p.send).NoIPC)
			l.devOps = append(l.devOps, rank.DeviceP2P{Send: p.send, Peer: p.peer, Buf: b})
			continue
		}
		d := p.w.hostData(p.ptr, p.bytes)
		if p.send {
			l.host = append(l.host, rank.SendTo(p.peer, d))
		} else {
			l.host = append(l.host, rank.RecvFrom(p.peer, d))
		}
	}
	if len(l.selfSend) != len(l.selfRecv) {
		return fail(InvalidUsage, "rank %d: %d sends to itself but %d receives from itself in one group", c.rank, len(l.selfSend), len(l.selfRecv))
	}
	for i := range l.selfSend {
		s, r := l.selfSend[i], l.selfRecv[i]
		if s.bytes != r.bytes {
			return fail(InvalidUsage, "rank %d: a send of %d bytes to itself meets a receive of %d bytes", c.rank, s.bytes, r.bytes)
		}
		if dev {
			// The device group copies them (inside the flag kernel of a
			// gather's or scatter's root, or of torch's all_to_all over
			// sends and receives, where one runs): never bounced, a copy
			// on this GPU needs no IPC.
			src, err := c.lib.mem.buffer(c.gpuDev, s.w.sendReg, s.ptr, s.bytes)
			if err != nil {
				return err
			}
			dst, err := c.lib.mem.buffer(c.gpuDev, r.w.recvReg, r.ptr, r.bytes)
			if err != nil {
				return err
			}
			l.devOps = append(l.devOps, rank.DeviceP2P{Send: true, Peer: c.rank, Buf: src}, rank.DeviceP2P{Peer: c.rank, Buf: dst})
			l.bounced = append(l.bounced, false, false)
			continue
		}
		copy(hostBytes(r.ptr, r.bytes), hostBytes(s.ptr, s.bytes))
	}
	if dev {
		if len(l.devOps) == 0 {
			return nil
		}
		return c.groupDevice(stream, l.devOps, l.bounced)
	}
	if len(l.host) == 0 {
		return nil
	}
	return c.rc.Group(c.ctx, l.host...)
}

// runColl runs one collective. One that ends waiting (its deadline, an
// abort) names the members that have not called it (withheld.go).
func (c *Comm) runColl(w *work) (err error) {
	seq := c.prog.begin(w.call.Kind, !w.device)
	if c.oneRank(w) {
		return c.runOneRank(w) // no peer to wait for (onerank.go)
	}
	if !w.device {
		defer c.prog.done()
	}
	c.prog.now.enter(seq) // watchStalls (stalls.go)
	defer c.prog.now.leave()
	defer func() {
		if err != nil {
			err = c.nameWithheld(seq, err)
		} else if w.device {
			// Enqueued: it may wait inside the GPU for a member that has
			// not called it, with no host thread in it (stalls_enqueued.go).
			c.prog.enq.Store(seq)
		}
	}()
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
		scalar, err := c.hostScalar(w)
		if err != nil {
			return err
		}
		scaled := make([]byte, w.sendN)
		if err := reduce.PreMul(scaled, hostBytes(call.Send, w.sendN), w.dt, scalar); err != nil {
			return refuse(InvalidArgument, "rank %d: PreMulSum: %w", c.rank, err)
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

// region is where w's send (send) or receive buffer was located.
func (w *work) region(send bool) Region {
	if send {
		return w.sendReg
	}
	return w.recvReg
}
