package direct

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flexlink/flexlink/collectives"
	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/fabric/nvlink"
	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// Ranks sharing one GPU: the leader path.
//
// Two processes on one GPU have two CUDA contexts, which the GPU
// time-slices. The handshake protocol (direct.go) makes a stream of one
// wait on an IPC event the other records, and a flag kernel (flag.go) spins
// on a counter the other's kernel sets: either waits for a context switch,
// measured at about 300 µs and 2.3 ms a call on one H100 (docs/PERF.md).
// When every rank of the plane is on one GPU (FLEXLINK_GPU_SHARED=leader,
// the default), each collective runs in one context instead: the lowest
// rank, the leader, maps every rank's buffers (CUDA IPC within one device)
// and runs the whole collective on its own stream as single-GPU kernels
// (shared_work.go); the other ranks enqueue no GPU work for it.
//
// One call:
//
//  1. every other rank waits (on the host, bounded by ctx) until its stream
//     has drained, so its send buffer is written and its recv buffer free,
//     then sends the leader a "ready" message: the call's signature, a
//     status word, descriptors of its send and recv buffers and, for
//     AllToAllv, its byte counts;
//  2. the leader receives every ready message, enqueues the collective on
//     its stream (ordered after its own earlier work), records its "done"
//     IPC event after it, sends every rank a "done" message (a status word,
//     the event's handle and, if the call failed on the leader or on any
//     rank, the error) and returns: its call is asynchronous, like every
//     call on the other paths;
//  3. the other ranks, once "done" arrives, poll the leader's event on the
//     host (bounded by ctx; never a stream wait, which would be a GPU wait
//     across contexts) and return when the collective has run: their recv
//     buffers hold the result and their stream is idle.
//
// The event is recorded again only in the leader's next call, after every
// other rank's next ready message, which each sends only once it has seen
// the event complete: so no rank polls a later record than its own call's.
// No event of the handshake protocol is touched, so the leader path and the
// event protocol (Group calls still take it) alternate freely on one
// plane. A rank that fails before its ready message (its stream reports an
// error) still sends one, marked failed, so the leader and every rank end
// the call with that rank's error rather than waiting out the deadline.
type sharedState struct {
	*peers
	ipc     *nvlink.Window // the plane's: every rank's buffers, described and mapped
	leader  int            // the rank that runs every call
	done    *gpu.Event     // the leader's done event: made by the leader, opened by the others on first use
	stage   pushScratch    // the leader's staging of in-place all-to-all sends
	calls   uint64         // calls so far (in the ready message, for traces)
	pairSeq []uint64       // calls so far with each rank (in the tags)
}

// newSharedState is the leader path of a plane whose ranks all share one
// GPU: the lowest rank leads and makes the done event.
func newSharedState(pr *peers, ipc *nvlink.Window) (*sharedState, error) {
	st := &sharedState{peers: pr, ipc: ipc, pairSeq: make([]uint64, pr.n)}
	if pr.me == st.leader {
		ev, err := pr.dev.NewIPCEvent()
		if err != nil {
			return nil, fmt.Errorf("shared-gpu done event: %w", err)
		}
		st.done = ev
	}
	return st, nil
}

// close frees the done event (made or opened) and the staging.
func (st *sharedState) close() error {
	if st == nil {
		return nil
	}
	var err error
	if st.done != nil {
		err = st.done.Close()
		st.done = nil
	}
	return errors.Join(err, st.stage.close())
}

const (
	phaseSharedReady = 4
	phaseSharedDone  = 5
	sharedHeader     = 4 * 8                       // call, signature, count, status
	sharedDoneBytes  = 8 + gpu.IPCHandleSize + 512 // status word, the done event's handle, the error text
	statusOK         = 0
	statusFailed     = 1
)

// allOnOneGPU reports whether every rank's GPU has the same PCI bus id.
func allOnOneGPU(bus []string) bool {
	for _, b := range bus {
		if !strings.EqualFold(b, bus[0]) {
			return false
		}
	}
	return len(bus) > 1
}

// sharedSig is the call's signature in the messages' tags: ranks that
// disagree about the collective fail with ErrMismatch. AllToAllv's element
// count differs per rank, so it is left out there.
func sharedSig(o *plane.Op) uint64 {
	sig := uint64(o.Kind) | uint64(o.DT)<<8 | uint64(o.Op)<<16 | uint64(o.Root)<<24
	if o.Kind != plane.AllToAllv {
		sig |= uint64(o.Count) << 32
	}
	return sig
}

// sharedReadyBytes is the length of a ready message for o.
func (st *sharedState) readyBytes(o *plane.Op) int {
	n := sharedHeader + 2*nvlink.DescBytes
	if o.Kind == plane.AllToAllv {
		n += 2 * st.n * 8
	}
	return n
}

// do runs one call on the leader path (see sharedState).
func (st *sharedState) do(ctx context.Context, o *plane.Op, s *gpu.Stream) error {
	st.calls++
	sig := sharedSig(o)
	if st.me != st.leader {
		return st.follow(ctx, o, s, sig)
	}
	return st.lead(ctx, o, s, sig)
}

// tag is the tag of a leader-path message with peer j.
func (st *sharedState) tag(phase uint64, j int, sig uint64) fabric.Tag {
	return fabric.Tag{gpuTagMagic | phase, st.c.ID(), st.pairSeq[j], sig}
}

// follow is one call on a rank other than the leader.
func (st *sharedState) follow(ctx context.Context, o *plane.Op, s *gpu.Stream, sig uint64) error {
	l := st.leader
	le := binary.LittleEndian
	m := make([]byte, st.readyBytes(o))
	le.PutUint64(m[0:], st.calls)
	le.PutUint64(m[8:], sig)
	le.PutUint64(m[16:], uint64(o.Count))
	mine := s.SynchronizeCtx(ctx)
	for k, b := range []*gpu.Buffer{o.Send, o.Recv} {
		if mine != nil {
			break
		}
		var d nvlink.Desc
		if d, mine = st.ipc.Describe(b); mine == nil {
			d.Put(m[sharedHeader+k*nvlink.DescBytes:])
		}
	}
	if mine != nil {
		le.PutUint64(m[24:], statusFailed)
	}
	if o.Kind == plane.AllToAllv {
		at := sharedHeader + 2*nvlink.DescBytes
		for j := 0; j < st.n; j++ {
			le.PutUint64(m[at+8*j:], uint64(o.SendBytes[j]))
			le.PutUint64(m[at+8*(st.n+j):], uint64(o.RecvBytes[j]))
		}
	}
	done := make([]byte, sharedDoneBytes)
	lp := st.c.Peers()
	send := lp.Send(l, st.tag(phaseSharedReady, l, sig), collectives.HostBuffer(m))
	recv := lp.Recv(l, st.tag(phaseSharedDone, l, sig), collectives.HostBuffer(done))
	err := fabric.WaitAll(ctx, send, recv)
	st.pairSeq[l]++
	switch {
	case err != nil:
		return fmt.Errorf("gpu %s on a shared gpu: with leader rank %d: %w", o.Kind, l, errors.Join(mine, err))
	case mine != nil:
		return fmt.Errorf("gpu %s on a shared gpu: %w", o.Kind, mine)
	case le.Uint64(done) != statusOK:
		return fmt.Errorf("gpu %s on a shared gpu: %s: %w", o.Kind, doneText(done), errs.ErrAborted)
	}
	if st.done == nil {
		ev, err := st.dev.OpenIPCEvent(done[8 : 8+gpu.IPCHandleSize])
		if err != nil {
			return fmt.Errorf("gpu %s on a shared gpu: open leader rank %d's done event: %w", o.Kind, l, err)
		}
		st.done = ev
	}
	if err := st.done.SynchronizeCtx(ctx); err != nil {
		return fmt.Errorf("gpu %s on a shared gpu: waiting for leader rank %d's work: %w", o.Kind, l, err)
	}
	return nil
}

// lead is one call on the leader: gather the ready messages, run the
// collective for every rank, wait for it, and tell every rank how it went.
func (st *sharedState) lead(ctx context.Context, o *plane.Op, s *gpu.Stream, sig uint64) error {
	lp := st.c.Peers()
	in := make([][]byte, st.n)
	reqs := make([]fabric.Request, 0, st.n)
	for j := 0; j < st.n; j++ {
		if j != st.me {
			in[j] = make([]byte, st.readyBytes(o))
			reqs = append(reqs, lp.Recv(j, st.tag(phaseSharedReady, j, sig), collectives.HostBuffer(in[j])))
		}
	}
	t0 := time.Now()
	if err := fabric.WaitAll(ctx, reqs...); err != nil {
		return fmt.Errorf("gpu %s on a shared gpu: ready messages: %w", o.Kind, err)
	}
	t1 := time.Now()
	err := st.run(o, s, in)
	if err == nil {
		err = s.Record(st.done)
	}
	if lg := st.c.Log(); lg.IsTrace() {
		lg.Trace("shared-gpu call", "op", o.Kind.String(), "count", o.Count, "ready_wait", t1.Sub(t0), "enqueue", time.Since(t1))
	}
	done := make([]byte, sharedDoneBytes)
	if err == nil {
		var h []byte
		if h, err = st.done.IPCHandle(); err == nil {
			copy(done[8:], h)
		}
	}
	if err != nil {
		binary.LittleEndian.PutUint64(done, statusFailed)
		copy(done[8+gpu.IPCHandleSize:], fmt.Sprintf("leader rank %d on %s: %v", st.me, st.c.Host(), err))
	}
	reqs = reqs[:0]
	for j := 0; j < st.n; j++ {
		if j != st.me {
			reqs = append(reqs, lp.Send(j, st.tag(phaseSharedDone, j, sig), collectives.HostBuffer(done)))
		}
	}
	werr := fabric.WaitAll(ctx, reqs...)
	for j := 0; j < st.n; j++ {
		if j != st.me {
			st.pairSeq[j]++
		}
	}
	if err == nil && werr != nil {
		err = fmt.Errorf("gpu %s on a shared gpu: done messages: %w", o.Kind, werr)
	}
	return err
}

// run maps every rank's buffers from its ready message and enqueues
// the collective on s.
func (st *sharedState) run(o *plane.Op, s *gpu.Stream, in [][]byte) error {
	le := binary.LittleEndian
	var failed []int
	for j, m := range in {
		if m != nil && le.Uint64(m[24:]) != statusOK {
			failed = append(failed, j)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("ranks %v could not start the call (their stream failed: see their errors)", failed)
	}
	sc := &sharedCall{o: o, n: st.n, send: make([]*gpu.Buffer, st.n), recv: make([]*gpu.Buffer, st.n)}
	if o.Kind == plane.AllToAllv {
		sc.sb, sc.rb = make([][]int, st.n), make([][]int, st.n)
	}
	for j := 0; j < st.n; j++ {
		if j == st.me {
			sc.send[j], sc.recv[j] = o.Send, o.Recv
			if sc.sb != nil {
				sc.sb[j], sc.rb[j] = o.SendBytes, o.RecvBytes
			}
			continue
		}
		for k, to := range []*[]*gpu.Buffer{&sc.send, &sc.recv} {
			d := nvlink.GetDesc(in[j][sharedHeader+k*nvlink.DescBytes:])
			if d.Empty() {
				continue // a rooted op's missing buffer
			}
			b, err := st.ipc.Open(j, d)
			if err != nil {
				return err
			}
			(*to)[j] = b
		}
		if sc.sb != nil {
			at := sharedHeader + 2*nvlink.DescBytes
			sc.sb[j], sc.rb[j] = make([]int, st.n), make([]int, st.n)
			for k := 0; k < st.n; k++ {
				sc.sb[j][k] = int(le.Uint64(in[j][at+8*k:]))
				sc.rb[j][k] = int(le.Uint64(in[j][at+8*(st.n+k):]))
			}
		}
	}
	return st.work(sc, s)
}

// doneText is the error text of a failed done message.
func doneText(done []byte) string {
	t := done[8+gpu.IPCHandleSize:]
	if i := strings.IndexByte(string(t), 0); i >= 0 {
		t = t[:i]
	}
	return string(t)
}

// share gives every rank the leader's done event at setup, so a follower
// opens it now rather than inside its first call: on one H200, a
// follower's cuIpcOpenEventHandle made inside a call waited for good while
// another thread of its process was in a copy to pageable memory, itself
// waiting for the stream the call was to release (the enqueue-and-return
// engine of an earlier version). Collective, under the communicator's queue.
func (st *sharedState) share(ctx context.Context, e *collectives.Engine) error {
	h := make([]byte, gpu.IPCHandleSize)
	if st.me == st.leader {
		b, err := st.done.IPCHandle()
		if err != nil {
			return fmt.Errorf("shared-gpu done event's handle: %w", err)
		}
		copy(h, b)
	}
	all := make([]byte, st.n*len(h))
	if err := e.AllGather(ctx, collectives.HostBuffer(h), collectives.HostBuffer(all), len(h), dtype.Uint8); err != nil {
		return fmt.Errorf("share the shared-gpu done event: %w", err)
	}
	if st.me == st.leader {
		return nil
	}
	ev, err := st.dev.OpenIPCEvent(all[st.leader*len(h) : (st.leader+1)*len(h)])
	if err != nil {
		return fmt.Errorf("open leader rank %d's done event: %w", st.leader, err)
	}
	st.done = ev
	return nil
}
