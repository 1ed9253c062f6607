package plane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/flexlink/flexlink/gpu"
	"github.com/flexlink/flexlink/internal/errs"
)

// Enqueue and return (NCCL's stream semantics for every call). Some calls
// wait on the host inside Plane.Do: for the peers to reach the same call
// (the handshake paths' ready and done messages), or for the GPU (ranks
// sharing one GPU, the staged plane). With Async on, such a call is not
// run on the caller's thread. The caller's thread instead enqueues, on the
// caller's stream s,
//
//  1. a record of an event (the call's inputs are ready when s reaches it),
//  2. a wait until a word of pinned host memory, mapped for the device,
//     reaches the call's number (cuStreamWaitValue32, GEQ),
//
// hands the call to the DeviceComm's engine and returns. The engine, a
// goroutine, runs the calls in order on a stream of its own: the stream
// waits for the event, the call runs there exactly as it would have on s
// (Plane.Do, under the communicator's queue, with its abort handling), and
// then the stream writes the call's number into the word, which releases
// s. Work enqueued on s after the call waits for the call's results; work
// enqueued before it runs first. A call that fails still writes its number
// (the stream never hangs on a call that ended), and the failure is the
// communicator's asynchronous error (AsyncError) and ends it, as a failed
// call always did.
//
// The engine never makes a driver call that waits for the context to be
// idle (a module load, a free): the callers' streams wait for the engine,
// so such a call would wait forever. Kernels load when Async is turned on;
// outgrown scratch is kept until Close (collectives/direct).
//
// A call that would not wait (a flag kernel, a one-rank copy, a capture)
// still runs on the caller's thread and stream when the engine is idle;
// while the engine has calls, every later call goes to it too, so calls
// reach the plane in the order they were made. Calls on host buffers and
// anything else that uses the communicator's queue must Drain first.
type asyncQ struct {
	d   *DeviceComm
	ctx context.Context // the calls' context (the communicator's life, its abort)

	word *gpu.HostMem // the release word: the number of the last call the engine finished
	addr uintptr      // word's device address
	own  *gpu.Stream  // the engine's stream

	mu       sync.Mutex
	cond     *sync.Cond // signalled when a call arrives, one ends, or the engine stops
	jobs     []asyncJob // calls waiting for the engine
	running  bool       // the engine is running a call
	started  time.Time  // when it started it
	stopping bool
	stopped  chan struct{}
	seq      uint32       // the last call number handed out
	free     []*gpu.Event // recorded events the engine's stream has waited for, to reuse
	tails    []streamTail // the streams that wait on the word, with an event after their last wait
	err      atomic.Pointer[error]
	handed   atomic.Uint64 // calls handed to the engine so far
}

type asyncJob struct {
	what  string
	o     *Op
	ready *gpu.Event
	seq   uint32
}

// streamTail is a caller's stream and an event recorded after its last
// wait on the word: the word is freed only once every tail is done.
type streamTail struct {
	s  *gpu.Stream
	ev *gpu.Event
}

// HostWaiter is a Plane that can tell, before a call, whether Do would
// wait on the host for it (for peers, or for the GPU). A plane without it
// is taken to wait for every call.
type HostWaiter interface {
	HostWaits(o *Op) bool
}

// Async turns on enqueue-and-return for d's calls (see asyncQ): calls that
// would wait on the host run later, under ctx, on the DeviceComm's own
// stream. ctx must outlive the calls (a communicator's context: its
// cancellation is the abort). It is idempotent.
func (d *DeviceComm) Async(ctx context.Context) error {
	if d.async != nil {
		return nil
	}
	// The engine must never wait for the context to be idle while callers'
	// streams wait for it: a module load does, so the kernels load now.
	if err := d.dev.LoadKernels(); err != nil {
		return fmt.Errorf("rank %d: gpu async calls: %w", d.c.Rank(), err)
	}
	word, err := d.dev.AllocHost(8)
	if err != nil {
		return fmt.Errorf("rank %d: gpu async calls: release word: %w", d.c.Rank(), err)
	}
	addr, err := word.DevicePtr()
	if err != nil {
		word.Free()
		return fmt.Errorf("rank %d: gpu async calls: release word's device address: %w", d.c.Rank(), err)
	}
	own, err := d.dev.NewStream()
	if err != nil {
		word.Free()
		return fmt.Errorf("rank %d: gpu async calls: stream: %w", d.c.Rank(), err)
	}
	clear(word.Bytes()) // cuMemHostAlloc's memory is not zeroed: call numbers start at 1
	a := &asyncQ{d: d, ctx: ctx, word: word, addr: addr, own: own, stopped: make(chan struct{})}
	a.cond = sync.NewCond(&a.mu)
	d.async = a
	// The engine ends with ctx too (an aborted communicator is not
	// closed), once it has run every call handed to it.
	context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	go a.engine()
	return nil
}

// run runs o now on the caller's thread, or hands it to the engine.
func (a *asyncQ) run(ctx context.Context, what string, o *Op, s *gpu.Stream) error {
	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		return fmt.Errorf("rank %d: %s on a closed device communicator: %w", a.d.c.Rank(), what, errs.ErrClosed)
	}
	if err := a.failed(); err != nil {
		a.mu.Unlock()
		return err
	}
	idle := !a.running && len(a.jobs) == 0
	if idle && !a.waits(o) {
		// Nothing of the engine's can interleave: it has no call, and
		// only callers hand it one.
		defer a.mu.Unlock()
		return a.d.c.Run(ctx, what, func(ctx context.Context) error { return a.d.do(ctx, o, s) })
	}
	a.mu.Unlock()
	if o.Capture != 0 {
		// A captured call enqueues nothing that waits; it needs the
		// communicator's queue to itself (a flag region may be made).
		if err := a.drain(ctx); err != nil {
			return err
		}
		return a.d.c.Run(ctx, what, func(ctx context.Context) error { return a.d.do(ctx, o, s) })
	}
	return a.submit(what, o, s)
}

// waits reports whether o would wait on the host inside Do.
func (a *asyncQ) waits(o *Op) bool {
	if o.Capture != 0 {
		return false
	}
	hw, ok := a.d.plane.(HostWaiter)
	return !ok || hw.HostWaits(o)
}

// submit enqueues the event and the wait on s and hands o to the engine.
// The wait is enqueued after the hand-over: on the fake driver a stream
// runs on its caller's goroutine, so the wait blocks until the engine has
// run the call.
func (a *asyncQ) submit(what string, o *Op, s *gpu.Stream) error {
	a.mu.Lock()
	if err := a.ctx.Err(); err != nil || a.stopping {
		// The engine has ended or is ending: nothing would release s.
		a.mu.Unlock()
		return fmt.Errorf("rank %d: %s on an ended device communicator: %w", a.d.c.Rank(), what, errors.Join(err, errs.ErrClosed))
	}
	ev, err := a.event()
	if err != nil {
		a.mu.Unlock()
		return err
	}
	if err := s.Record(ev); err != nil {
		a.free = append(a.free, ev)
		a.mu.Unlock()
		return fmt.Errorf("rank %d: %s: record the call's start on the caller's stream: %w", a.d.c.Rank(), what, err)
	}
	a.seq++
	seq := a.seq
	a.jobs = append(a.jobs, asyncJob{what: what, o: o, ready: ev, seq: seq})
	a.handed.Add(1)
	a.cond.Broadcast()
	a.mu.Unlock()
	if err := s.WaitValue32(a.addr, seq, gpu.WaitGEQ); err != nil {
		// The call runs, but s does not wait for it: the communicator
		// cannot keep the stream's order, so it fails.
		err = fmt.Errorf("rank %d: %s: make the caller's stream wait for the call: %w", a.d.c.Rank(), what, err)
		a.mu.Lock()
		a.fail(err)
		a.mu.Unlock()
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tail(s)
}

// event is a free event, or a new one. Held: a.mu.
func (a *asyncQ) event() (*gpu.Event, error) {
	if n := len(a.free); n > 0 {
		ev := a.free[n-1]
		a.free = a.free[:n-1]
		return ev, nil
	}
	ev, err := a.d.dev.NewEvent(false)
	if err != nil {
		return nil, fmt.Errorf("rank %d: gpu async calls: event: %w", a.d.c.Rank(), err)
	}
	return ev, nil
}

// tail records, after s's wait on the word, the event that says s is past
// it (Close frees the word only then). Held: a.mu.
func (a *asyncQ) tail(s *gpu.Stream) error {
	for i := range a.tails {
		if a.tails[i].s.Handle() == s.Handle() {
			return s.Record(a.tails[i].ev)
		}
	}
	ev, err := a.d.dev.NewEvent(false)
	if err != nil {
		return fmt.Errorf("rank %d: gpu async calls: event: %w", a.d.c.Rank(), err)
	}
	if err := s.Record(ev); err != nil {
		ev.Close()
		return err
	}
	a.tails = append(a.tails, streamTail{s: s, ev: ev})
	return nil
}

// engine runs the handed calls in order until Close.
func (a *asyncQ) engine() {
	defer close(a.stopped)
	for {
		a.mu.Lock()
		for len(a.jobs) == 0 && !a.stopping && a.ctx.Err() == nil {
			a.cond.Wait()
		}
		if len(a.jobs) == 0 {
			a.mu.Unlock()
			return
		}
		j := a.jobs[0]
		a.jobs = a.jobs[1:]
		a.running, a.started = true, time.Now()
		a.mu.Unlock()

		err := a.runJob(j)

		a.mu.Lock()
		a.free = append(a.free, j.ready)
		a.running = false
		if err != nil {
			a.fail(err)
		}
		a.cond.Broadcast()
		a.mu.Unlock()
	}
}

// runJob runs one call on the engine's stream and releases the caller's
// stream after it, whatever happened.
func (a *asyncQ) runJob(j asyncJob) error {
	err := a.failed()
	if err == nil {
		err = a.own.Wait(j.ready)
	}
	if err == nil {
		err = a.d.c.Run(a.ctx, j.what, func(ctx context.Context) error { return a.d.do(ctx, j.o, a.own) })
	}
	if werr := a.own.WriteValue32(a.addr, j.seq); werr != nil {
		// The stream cannot take the write: release from the host.
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&a.word.Bytes()[0])), j.seq)
		err = errors.Join(err, fmt.Errorf("rank %d: %s: release the caller's stream: %w", a.d.c.Rank(), j.what, werr))
	}
	return err
}

// fail keeps the first failure. Held: a.mu.
func (a *asyncQ) fail(err error) {
	a.err.CompareAndSwap(nil, &err)
}

// failed is the first failure of a call the engine ran, nil when none.
func (a *asyncQ) failed() error {
	if p := a.err.Load(); p != nil {
		return *p
	}
	return nil
}

// drain waits until the engine has run every call handed to it (their
// work is enqueued; it need not have run on the GPU), or ctx ends.
func (a *asyncQ) drain(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.running || len(a.jobs) > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("rank %d: waiting for %d enqueued device calls to be run: %w", a.d.c.Rank(), a.pendingLocked(), err)
		}
		a.cond.Wait()
	}
	return a.failed()
}

// pending is the number of calls handed to the engine and not yet run,
// and how long the one it is running has run (0 when none).
func (a *asyncQ) pending() (int, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ran time.Duration
	if a.running {
		ran = time.Since(a.started)
	}
	return a.pendingLocked(), ran
}

func (a *asyncQ) pendingLocked() int {
	n := len(a.jobs)
	if a.running {
		n++
	}
	return n
}

// close drains (bounded by ctx), stops the engine and frees what it holds:
// the word only once every stream that waits on it is past its last wait
// (checked until ctx ends; leaked otherwise, as a stream may still read it).
func (a *asyncQ) close(ctx context.Context) error {
	derr := a.drain(ctx)
	a.mu.Lock()
	a.stopping = true
	a.cond.Broadcast()
	a.mu.Unlock()
	if derr != nil {
		// The engine may be inside a call that waits for peers: it ends
		// with the communicator; the resources stay with it.
		return derr
	}
	<-a.stopped
	var errsOut []error
	past := true
	for _, t := range a.tails {
		if err := t.ev.SynchronizeCtx(ctx); err != nil {
			past = false
			errsOut = append(errsOut, err)
		}
	}
	if err := a.own.SynchronizeCtx(ctx); err != nil {
		past = false
		errsOut = append(errsOut, err)
	}
	if past {
		for _, t := range a.tails {
			errsOut = append(errsOut, t.ev.Close())
		}
		for _, ev := range a.free {
			errsOut = append(errsOut, ev.Close())
		}
		errsOut = append(errsOut, a.own.Close(), a.word.Free())
	}
	return errors.Join(errsOut...)
}
